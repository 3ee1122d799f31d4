import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, makeTelemetryFilterString, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { activityDepsFromConfig, createActivities, temporalConnectionOptions, type DeliveryEvent } from '../../src/delivery';
import { createLogger } from '../../src/config/logger';
import { tracingOn, workerTracing } from '../../src/tracing';
import { TEST_ENV, startTestApp, type TestApp, type TestAppOptions } from './app';
import { productionWorkflowBundle, testTemporalAddress } from './temporal';
import { startServiceProcess, type ServiceProcess } from './service-process';
import { startWorkerProcess, type WorkerProcess } from './worker-process';

/**
 * Both delivery engines behind one test interface, so a promise the README makes about
 * deliveries is checked from one table of cases on each: `describe.each(ENGINES)`.
 *
 * - embedded: the API process runs the deliveries itself (no TEMPORAL_ADDRESS).
 * - temporal: the API starts a workflow per delivery on the run's Temporal development
 *   server (test/support/temporal.ts), on a task queue of this app's own, and a worker in
 *   this process runs the production workflow bundle with the production activities; or,
 *   with `{ worker: 'process' }`, `npm run worker` in a process of its own (a suite whose
 *   load would starve one event loop shared by the API, the worker and the receivers).
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
  /** What the worker's activities reported (both engines run the same activities); empty when the worker is a process of its own. */
  events: DeliveryEvent[];
  /** Temporal only: a client of the run's server and this app's task queue; the worker when it runs in this process. */
  temporal: { client: Client; taskQueue: string; worker: Worker | null; workerProcess: WorkerProcess | null } | null;
  /**
   * Stops sending as a deploy does, before close(): no attempt begins after it, and the
   * attempts in flight end as they would (the embedded engine's close, the worker's shutdown).
   */
  stopDeliveries(): Promise<void>;
}

export interface EngineOptions {
  /**
   * Where the Temporal worker runs: in this process (default), or as in production, `npm run
   * worker` in a process of its own and the API that starts the workflows, `npm start`, in
   * another (`url` is then that API's; the app in this process still serves `orm`, `tenant`).
   */
  worker?: 'in-process' | 'process';
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

export async function startEngineApp(engine: EngineName, env: Record<string, string> = {}, options: TestAppOptions = {}, engineOptions: EngineOptions = {}): Promise<EngineApp> {
  const events: DeliveryEvent[] = [];
  if (engine === 'embedded') {
    const t = await startTestApp(env, options);
    const embedded = t.app.delivery.embedded!;
    return { ...t, engine, events, idle: () => embedded.idle(), temporal: null, stopDeliveries: () => embedded.close() };
  }

  quietRuntime();
  const address = testTemporalAddress();
  const taskQueue = `deliveries-${randomBytes(6).toString('hex')}`;
  const appEnv = { TEMPORAL_ADDRESS: address, TEMPORAL_TASK_QUEUE: taskQueue, TEMPORAL_SEARCH_ATTRIBUTES: 'true', ...env };
  const t = await startTestApp(appEnv, options);
  // The app's own settings: a run against a server with TLS or an API key connects as the service does.
  const connectionOptions = temporalConnectionOptions(t.config.temporal!);
  if (engineOptions.worker === 'process') return withWorkerProcess(t, appEnv, taskQueue, await Connection.connect(connectionOptions));
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
  const stopDeliveries = async () => {
    if (worker.getState() === 'RUNNING') worker.shutdown();
    await running;
  };

  return {
    ...t,
    engine,
    events,
    idle: () => temporalIdle(t, client, taskQueue),
    temporal: { client, taskQueue, worker, workerProcess: null },
    stopDeliveries,
    async close() {
      await stopDeliveries();
      await connection.close();
      await client.connection.close();
      await t.close();
    },
  };
}

/** The Temporal app with `npm run worker` as a process of its own on the app's database and task queue. */
async function withWorkerProcess(t: TestApp, appEnv: Record<string, string>, taskQueue: string, connection: Connection): Promise<EngineApp> {
  let worker: WorkerProcess | null = null;
  let api: ServiceProcess | null = null;
  try {
    [worker, api] = await Promise.all([
      startWorkerProcess({ ...appEnv, DATABASE_URL: t.databaseUrl }),
      startServiceProcess('api', { ...TEST_ENV, ...appEnv, DATABASE_URL: t.databaseUrl }),
    ]);
  } catch (error) {
    await Promise.all([worker?.stop(), api?.stop()]);
    await connection.close();
    await t.close();
    throw error;
  }
  const running = worker;
  const apiProcess = api;
  const client = new Client({ connection });
  // SIGTERM: the worker lets its attempts in flight finish, then exits.
  const stopDeliveries = async () => {
    await running.stop();
  };
  return {
    ...t,
    url: apiProcess.url!,
    engine: 'temporal',
    events: [],
    idle: () => temporalIdle(t, client, taskQueue),
    temporal: { client, taskQueue, worker: null, workerProcess: running },
    stopDeliveries,
    async close() {
      await stopDeliveries();
      await apiProcess.stop();
      await connection.close();
      await t.close();
    },
  };
}

/** No delivery workflow of this task queue is running unless its row is held. */
async function temporalIdle(t: TestApp, client: Client, taskQueue: string): Promise<void> {
  for (;;) {
    const open: string[] = [];
    for await (const execution of client.workflow.list({ query: `TaskQueue = "${taskQueue}" AND ExecutionStatus = "Running"` })) open.push(execution.workflowId);
    if (open.length === 0) return;
    if ((await heldAmong(t, open)) === open.length) return;
    await sleep(100);
  }
}

/** How many of these workflows' deliveries are held (waiting on a kill switch or a pause). */
async function heldAmong(t: TestApp, workflowIds: string[]): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ held: number }[]>(
    `select count(*)::int as held from webhook_deliveries where workflow_id in (${workflowIds.map(() => '?').join(', ')}) and status = 'held'`,
    workflowIds,
  );
  return row?.held ?? 0;
}
