import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, makeTelemetryFilterString, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { activityDepsFromConfig, createActivities, temporalConnectionOptions, type DeliveryEvent } from '../../src/delivery';
import { createLogger } from '../../src/config/logger';
import { tracingOn, workerTracing } from '../../src/tracing';
import { startTestApp, type TestApp, type TestAppOptions } from './app';
import { productionWorkflowBundle, testTemporalAddress } from './temporal';

/**
 * Both delivery engines behind one test interface, so a promise the README makes about
 * deliveries is checked from one table of cases on each: `describe.each(ENGINES)`.
 *
 * - embedded: the API process runs the deliveries itself (no TEMPORAL_ADDRESS).
 * - temporal: the API starts a workflow per delivery on the run's Temporal development
 *   server (test/support/temporal.ts), on a task queue of this app's own, and a worker in
 *   this process runs the production workflow bundle with the production activities.
 */
export const ENGINES = ['embedded', 'temporal'] as const;
export type EngineName = (typeof ENGINES)[number];

export interface EngineApp extends TestApp {
  engine: EngineName;
  /**
   * Resolves once the engine has nothing in flight and nothing due. Embedded: the engine's
   * own idle(). Temporal: no delivery workflow of this app is running unless its row is held
   * (a held delivery waits for its interval or the release signal, as on the embedded engine).
   */
  idle(): Promise<void>;
  /** What the worker's activities reported (both engines run the same activities). */
  events: DeliveryEvent[];
  /** Temporal only: a client of the run's server and this app's task queue. */
  temporal: { client: Client; taskQueue: string; worker: Worker } | null;
}

let runtimeInstalled = false;

/** Keeps the worker's own logs to errors: the suites assert outcomes, not log lines. */
function quietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger('ERROR'), telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } } });
  } catch {
    // Another suite in this process installed it first.
  }
}

export async function startEngineApp(engine: EngineName, env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<EngineApp> {
  const events: DeliveryEvent[] = [];
  if (engine === 'embedded') {
    const t = await startTestApp(env, options);
    return { ...t, engine, events, idle: () => t.app.delivery.embedded!.idle(), temporal: null };
  }

  quietRuntime();
  const address = testTemporalAddress();
  const taskQueue = `deliveries-${randomBytes(6).toString('hex')}`;
  const t = await startTestApp({ TEMPORAL_ADDRESS: address, TEMPORAL_TASK_QUEUE: taskQueue, TEMPORAL_SEARCH_ATTRIBUTES: 'true', ...env }, options);
  // The app's own settings: a run against a server with TLS or an API key connects as the service does.
  const connectionOptions = temporalConnectionOptions(t.config.temporal!);
  const connection = await NativeConnection.connect(connectionOptions);
  const worker = await Worker.create({
    connection,
    taskQueue,
    // With tracing on (a trace suite), as a worker with tracing on runs: traced bundle, interceptors, sink.
    workflowBundle: await productionWorkflowBundle({ traced: tracingOn() }),
    ...workerTracing({ prebuiltBundle: true }),
    // One DeliveryRecords per process: this worker runs in the app's, so it uses the app's (and its logger, if given).
    activities: createActivities(
      activityDepsFromConfig(t.config, {
        orm: t.orm,
        records: t.app.delivery.records,
        logger: options.logger ?? createLogger('silent'),
        now: options.now,
        onEvent: (event) => events.push(event),
      }),
    ),
  });
  const running = worker.run();
  const client = new Client({ connection: await Connection.connect(connectionOptions) });

  async function idle(): Promise<void> {
    for (;;) {
      const open: string[] = [];
      for await (const execution of client.workflow.list({ query: `TaskQueue = "${taskQueue}" AND ExecutionStatus = "Running"` })) open.push(execution.workflowId);
      if (open.length === 0) return;
      if ((await heldAmong(t, open)) === open.length) return;
      await sleep(100);
    }
  }

  return {
    ...t,
    engine,
    events,
    idle,
    temporal: { client, taskQueue, worker },
    async close() {
      worker.shutdown();
      await running;
      await connection.close();
      await client.connection.close();
      await t.close();
    },
  };
}

/** How many of these workflows' deliveries are held (waiting on a kill switch or a pause). */
async function heldAmong(t: TestApp, workflowIds: string[]): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ held: number }[]>(
    `select count(*)::int as held from webhook_deliveries where workflow_id in (${workflowIds.map(() => '?').join(', ')}) and status = 'held'`,
    workflowIds,
  );
  return row?.held ?? 0;
}
