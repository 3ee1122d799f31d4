/**
 * Fault injection: `npm run faults`. Runs the service as real child processes against a
 * PostgreSQL cluster of its own (initdb in a temporary directory, on a free port), so that
 * restarting that cluster touches nothing else, and injects what production will do to it:
 * each scenario is a file of its own under scenarios/, run in the order below, first on the
 * embedded engine, then on Temporal (a development server of this run's own, the API with
 * TEMPORAL_ADDRESS, and the delivery worker as a process of its own; scenario.ts).
 *
 * Per event it checks what the README promises: arrivals at the receiver equal the attempts
 * recorded as sent, exactly one successful attempt per delivered event, and no arrival
 * without an accepted call; the totals are printed per engine. It stops every process it
 * started (services, workers, the Temporal server) and removes its cluster and Temporal
 * files, also when a check fails. Traffic stays on 127.0.0.1.
 *
 * FAULTS_ONLY=name,name runs only those scenarios (their names are in the files); the
 * Temporal server and its processes start only when a Temporal scenario runs.
 */
import { makeTestTls } from '../../test/support/tls';
import { check, countFor, totals, violations } from './checks';
import { OwnCluster } from './cluster';
import { prepareDatabase } from './database';
import { killAll, serviceOutput, useDatabase } from './processes';
import { TemporalStage, type Scenario, type Stage } from './scenario';
import { scenario as receiverFaults } from './scenarios/receiver-faults';
import { scenario as sigkill } from './scenarios/sigkill';
import { scenario as postgresStopped } from './scenarios/postgres-stopped';
import { scenario as postgresRestarted } from './scenarios/postgres-restarted';
import { scenario as twoInstances } from './scenarios/two-instances';
import { scenario as workerKilled } from './scenarios/worker-killed';
import { scenario as temporalRestarted } from './scenarios/temporal-restarted';
import { scenario as temporalPostgresRestarted } from './scenarios/temporal-postgres-restarted';
import { scenario as temporalDown } from './scenarios/temporal-down';

const EMBEDDED: Scenario[] = [receiverFaults, sigkill, postgresStopped, postgresRestarted, twoInstances];
const TEMPORAL: Scenario<TemporalStage>[] = [workerKilled, temporalRestarted, temporalPostgresRestarted, temporalDown];

function selected<S extends Stage>(scenarios: Scenario<S>[]): Scenario<S>[] {
  const only = process.env.FAULTS_ONLY?.split(',').map((name) => name.trim()).filter(Boolean);
  if (!only) return scenarios;
  const known = [...EMBEDDED, ...TEMPORAL].map((s) => s.name);
  const unknown = only.filter((name) => !known.includes(name));
  if (unknown.length > 0) throw new Error(`FAULTS_ONLY names no scenario ${unknown.join(', ')} (scenarios: ${known.join(', ')})`);
  return scenarios.filter((s) => only.includes(s.name));
}

let cluster: OwnCluster | null = null;
let temporal: TemporalStage | null = null;

async function main(): Promise<void> {
  const embedded = selected(EMBEDDED);
  const onTemporal = selected(TEMPORAL);
  cluster = await OwnCluster.create();
  console.log(`PostgreSQL cluster of this run on 127.0.0.1:${cluster.port}`);
  // As in production: migrations as the owner role, the service as the service role.
  useDatabase(await prepareDatabase(cluster));
  const tls = await makeTestTls();
  const stage: Stage = {
    cluster,
    tls,
    env: {
      DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
      DELIVERY_EXTRA_CA_PEM: tls.caPem,
      DELIVERY_POLL_INTERVAL_MS: '50',
      DELIVERY_TEST_RETRY_INTERVAL_MS: '300',
      DELIVERY_ATTEMPT_TIMEOUT_MS: '1000',
    },
  };

  for (const scenario of embedded) {
    console.log(scenario.title);
    await scenario.run(stage);
  }

  countFor('temporal');
  if (onTemporal.length > 0) {
    temporal = new TemporalStage(stage);
    await temporal.begin();
    for (const scenario of onTemporal) {
      console.log(scenario.title);
      await scenario.run(temporal);
    }
    await temporal.stop();
  }

  console.log('');
  for (const [engine, total] of Object.entries(totals)) {
    console.log(
      `${engine}: faults injected: ${total.faultsInjected}, deliveries: ${total.deliveries}, lost: ${total.lost}, arrivals without an accepted call: ${total.unexplainedArrivals}`,
    );
  }
  check(
    Object.values(totals).every((total) => total.lost === 0 && total.unexplainedArrivals === 0),
    'on both engines, nothing lost, nothing sent that was not asked for',
  );
}

async function cleanUp(): Promise<void> {
  killAll();
  await temporal?.kill();
  temporal = null;
  cluster?.destroy();
  cluster = null;
}

main()
  .catch((error: unknown) => {
    console.error(error, (error as { cause?: unknown }).cause ?? '');
    violations.push(`the run stopped: ${String(error)}`);
  })
  .finally(async () => {
    await cleanUp();
    console.log(`${violations.length === 0 ? 'faults: all checks passed' : `faults: ${violations.length} check(s) failed`}`);
    if (violations.length > 0) console.error(`last lines the services printed:\n${serviceOutput.join('\n')}`);
    process.exitCode = violations.length === 0 ? 0 : 1;
  });
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}
process.on('exit', killAll);
