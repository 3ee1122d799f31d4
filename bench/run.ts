/**
 * `npm run bench`: performance figures of the service, each the median of back-to-back
 * pairs with a baseline measured in the same run on the same machine (timings on a shared
 * 2-core machine are noisy; ratios much less so), reported with their spread. See
 * bench/README.md for what each figure means; each figure's load, baseline and goal are in
 * its own file under bench/figures/, the pair logic in harness.ts.
 *
 * The service runs in a child process (bench/server.ts); load comes from other child
 * processes (autocannon, pg, gRPC and HTTPS loops, the durable delivery loop) that serve
 * measured segments, so a figure and its baseline alternate without process start-ups in
 * between. The run creates and drops its own database. Exit code: 0 when every figure was
 * measured (goals missed or not), 1 when a figure could not be measured, 2 when the time
 * budget ran out.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { makeTestTls } from '../test/support/tls';
import { ensureServiceRoles, openDatabase, migrate, databaseAt } from '../src/db';
import { killAllChildren, startChild, type Child } from './lib';
import {
  BUDGET_SECONDS, CONNECTIONS, DATABASE_URL, DB_NAME, DELIVERIES, EXPLAIN, HISTORY_ROWS, KEEP_DATABASE, MEMORY_LARGE, MEMORY_SMALL, ONLY, PAIRS, RUN_NOTE, SECONDS,
  SERVER_NODE_ARGS, WARMUP_SECONDS, admin, diagnostics, elapsed, errors, figures, log,
} from './harness';
import { resultsMarkdown, textTable, type Machine, type Results } from './results';
import { DELIVERY_ENDPOINTS, LISTED_CONNECTIONS, LIST_ENDPOINTS, OTHER_ENDPOINTS_PER_ORG, OTHER_ORGS, createEndpoints, insertConnections, seedTenants, serverEnvOf, type Context } from './context';
import { LOAD_FRACTION, benchList } from './figures/list';
import { benchCreateWebhooks } from './figures/create';
import { benchGateway, benchGrpc } from './figures/gateway';
import { MANY_DELIVERY_ENDPOINTS, benchEngine } from './figures/engine';
import { benchPickup } from './figures/pickup';
import { benchTestDelivery } from './figures/test-delivery';
import { benchPublishFanOut } from './figures/fan-out';
import { benchMemory } from './figures/memory';
import { benchRetention } from './figures/retention';
import { benchIsolation, benchIsolationLarge } from './figures/isolation';

/** The table's order: each goal row, then the information rows under it. */
const ORDER = [
  'create_vs_bare', 'create_webhooks',
  'list_vs_bare', 'list_webhooks_p50', 'list_webhooks_p99', 'list_webhooks_saturated_p50', 'list_webhooks_saturated_p99', 'list_webhooks_twin_p50', 'list_webhooks_twin_p99',
  'rest_gateway_overhead', 'rest_gateway_ratio', 'grpc_unary',
  'delivery_engine', 'delivery_engine_keepalive', 'delivery_engine_1000', 'delivery_engine_1000_keepalive',
  'pickup_latency_p50', 'pickup_latency_p99', 'pickup_call_p50', 'pickup_call_p99', 'pickup_polled_p50', 'pickup_polled_p99', 'pickup_notify_p50',
  'publish_latency_p50', 'publish_latency_p99',
  'publish_fan_out', 'memory_growth',
  'retention_sweep_rate', 'retention_list', 'retention_list_p99', 'retention_publish',
  'isolation_embedded', 'isolation_temporal', 'isolation_embedded_10000', 'isolation_temporal_10000',
];

async function describeMachine(): Promise<Machine> {
  const cpus = os.cpus();
  const postgres = await admin(async (c) => (await c.query<{ v: string }>('select version() as v')).rows[0]!.v);
  return {
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    cpuModel: cpus[0]?.model ?? 'unknown',
    cpuCount: cpus.length,
    totalMemoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    postgres,
    loadAverageAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

/** Said of a run whose machine was busy: its timings are noisy whatever the ratios say. */
function noteOf(machine: Machine): string {
  const busiest = Math.max(machine.loadAverageAtStart[0]!, machine.loadAverageAtEnd?.[0] ?? 0);
  const busy = busiest > machine.cpuCount / 2 ? `Busy machine (1-minute load average up to ${busiest.toFixed(1)} on ${machine.cpuCount} cores): noisy figures.` : '';
  return [busy, RUN_NOTE].filter(Boolean).join(' ');
}

function writeResults(machine: Machine): Results {
  machine.loadAverageAtEnd = os.loadavg().map((l) => Math.round(l * 100) / 100);
  const results: Results = {
    generatedAt: new Date().toISOString(),
    wallSeconds: Math.round(elapsed()),
    machine,
    note: noteOf(machine),
    parameters: {
      seconds: SECONDS,
      pairs: PAIRS,
      warmupSeconds: WARMUP_SECONDS,
      connections: CONNECTIONS,
      deliveries: DELIVERIES,
      historyRows: HISTORY_ROWS,
      memoryRequests: [MEMORY_SMALL, MEMORY_LARGE],
      loadFraction: LOAD_FRACTION,
      serverNodeArgs: SERVER_NODE_ARGS,
      only: ONLY,
    },
    figures,
    diagnostics,
    errors,
  };
  fs.writeFileSync(path.join(__dirname, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(__dirname, 'results.md'), resultsMarkdown(results));
  return results;
}

async function main(): Promise<number> {
  log(`parameters: ${SECONDS} s per figure in ${PAIRS} pairs, ${CONNECTIONS} connections, ${DELIVERIES} deliveries, ${HISTORY_ROWS} history rows, memory ${MEMORY_SMALL}/${MEMORY_LARGE}, service Node arguments: ${SERVER_NODE_ARGS.join(' ') || 'none'}`);
  const machine = await describeMachine();
  const tls = await makeTestTls();

  await admin(async (c) => {
    await c.query(`drop database if exists ${DB_NAME} with (force)`);
    await c.query(`create database ${DB_NAME}`);
    if (EXPLAIN) {
      // Every new session on the database loads auto_explain (the bench connects after this).
      await c.query(`alter database ${DB_NAME} set session_preload_libraries = 'auto_explain'`);
      await c.query(`alter database ${DB_NAME} set auto_explain.log_min_duration = '${EXPLAIN}'`);
      await c.query(`alter database ${DB_NAME} set auto_explain.log_analyze = on`);
    }
    // The migrations grant to the service role by name; on a fresh cluster nothing has made it yet.
    await ensureServiceRoles(c, { login: true });
  });
  const pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
  // An idle client dropped by the server must not crash the run; the next query reports it.
  pool.on('error', (error) => log(`database pool: ${error.message}`));
  let server: Child<{ url: string }> | null = null;
  let receiver: Child<{ url: string }> | null = null;
  try {
    const orm = await openDatabase(databaseAt(DATABASE_URL), { pool: { min: 0, max: 1 } });
    try {
      await migrate(orm);
    } finally {
      await orm.close();
    }
    const serverEnv = serverEnvOf(tls);
    [receiver, server] = await Promise.all([
      startChild<{ url: string }>('receiver.ts', { keyPem: tls.keyPem, certPem: tls.certPem }),
      startChild<{ url: string }>('server.ts', {}, { env: serverEnv, nodeArgs: SERVER_NODE_ARGS }),
    ]);
    log(`service ${server.ready.url}, receiver ${receiver.ready.url}`);

    const others = Array.from({ length: OTHER_ORGS }, (_, i) => `other${i + 1}`);
    const tenants = await seedTenants(['write', 'list', 'twin', 'empty', 'conn', 'deliver', 'deliverMany', 'publish', 'pickup', 'mem', 'fanout', 'sweep', ...others]);
    const listUrls = Array.from({ length: LIST_ENDPOINTS }, (_, i) => `https://hooks${i}.example.com/in`);
    const listEndpointIds = await createEndpoints(server.ready.url, tenants.list!, listUrls);
    const twinEndpointIds = await createEndpoints(server.ready.url, tenants.twin!, listUrls);
    const emptyEndpointIds = await createEndpoints(server.ready.url, tenants.empty!, listUrls);
    const otherEndpoints: Context['otherEndpoints'] = [];
    for (const name of others) {
      const ids = await createEndpoints(server.ready.url, tenants[name]!, Array.from({ length: OTHER_ENDPOINTS_PER_ORG }, (_, i) => `https://${name}-${i}.example.com/in`));
      otherEndpoints.push(...ids.map((id) => ({ organizationId: tenants[name]!.organizationId, id })));
    }
    const deliveryEndpointIds = await createEndpoints(server.ready.url, tenants.deliver!, Array.from({ length: DELIVERY_ENDPOINTS }, (_, i) => `${receiver!.ready.url}/hook/${i}`));
    await insertConnections(pool, tenants.conn!.organizationId, LISTED_CONNECTIONS);
    await insertConnections(pool, tenants.mem!.organizationId, LISTED_CONNECTIONS);
    log(`seeded ${Object.keys(tenants).length} organizations, ${3 * LIST_ENDPOINTS + otherEndpoints.length + deliveryEndpointIds.length} endpoints`);

    const ctx: Context = { tls, pool, server, receiver, tenants, listEndpointIds, twinEndpointIds, emptyEndpointIds, otherEndpoints, deliveryEndpointIds, serverEnv };

    const benches: [string, () => Promise<void>][] = [
      ['list_webhooks', () => benchList(ctx)],
      ['create_webhooks', () => benchCreateWebhooks(ctx)],
      ['rest_gateway', () => benchGateway(ctx)],
      ['grpc_unary', () => benchGrpc(ctx)],
      ['delivery_engine', () => benchEngine(ctx, tenants.deliver!, deliveryEndpointIds)],
      [
        'delivery_engine_1000',
        async () => {
          const urls = Array.from({ length: MANY_DELIVERY_ENDPOINTS }, (_, i) => `${receiver!.ready.url}/hook/${i}`);
          await benchEngine(ctx, tenants.deliverMany!, await createEndpoints(server!.ready.url, tenants.deliverMany!, urls));
        },
      ],
      ['pickup_latency', () => benchPickup(ctx)],
      ['publish_latency', () => benchTestDelivery(ctx)],
      ['publish_fan_out', () => benchPublishFanOut(ctx)],
      ['memory_growth', () => benchMemory(ctx)],
      ['retention_sweep', () => benchRetention(ctx)],
      ['isolation_embedded', () => benchIsolation(ctx, 'embedded')],
      ['isolation_temporal', () => benchIsolation(ctx, 'temporal')],
      ['isolation_embedded_10000', () => benchIsolationLarge(ctx, 'embedded')],
      ['isolation_temporal_10000', () => benchIsolationLarge(ctx, 'temporal')],
    ];
    for (const [id, run] of benches) {
      if (ONLY && !ONLY.includes(id)) continue;
      await run();
    }
    figures.sort((x, y) => ORDER.indexOf(x.id) - ORDER.indexOf(y.id));
  } finally {
    await server?.stop();
    await receiver?.stop();
    await pool.end();
    if (!KEEP_DATABASE) await admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`));
  }

  const results = writeResults(machine);
  process.stdout.write(`\n${textTable(figures)}\n\n`);
  if (diagnostics.length > 0) process.stdout.write(`${diagnostics.map((d) => `- ${d}`).join('\n')}\n\n`);
  process.stdout.write(`machine: ${machine.cpuModel} × ${machine.cpuCount}, ${machine.totalMemoryGiB} GiB, Node ${machine.node}, ${machine.postgres.split(' on ')[0]}; load average ${machine.loadAverageAtStart.join(' / ')} → ${machine.loadAverageAtEnd!.join(' / ')}${results.note ? `; ${results.note}` : ''}\n`);
  process.stdout.write(`wrote bench/results.json and bench/results.md (${Math.round(elapsed())} s); \`npm run bench:table\` publishes them to the README\n`);
  if (errors.length > 0) {
    process.stderr.write(`\n${errors.length} figure(s) could not be measured:\n${errors.map((e) => `  - ${e}`).join('\n')}\n`);
    return 1;
  }
  return 0;
}

const watchdog = setTimeout(() => {
  process.stderr.write(`bench: time budget of ${BUDGET_SECONDS} s exceeded; stopping\n`);
  killAllChildren();
  admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`))
    .catch(() => undefined)
    .finally(() => process.exit(2));
}, BUDGET_SECONDS * 1000);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    killAllChildren();
    process.exit(130);
  });
}

main().then(
  (code) => {
    clearTimeout(watchdog);
    process.exit(code);
  },
  (error: unknown) => {
    clearTimeout(watchdog);
    killAllChildren();
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`))
      .catch(() => undefined)
      .finally(() => process.exit(1));
  },
);
