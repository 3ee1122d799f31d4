import type { AddressInfo } from 'node:net';
import { NativeConnection, Worker } from '@temporalio/worker';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { loadConfig, createLogger } from '../config';
import { openDatabase, resolveDatabaseUrl } from '../db';
import { startTracing, workerTracing } from '../tracing';
import { activityDepsFromConfig, createActivities } from './activities';
import { DeliveryMetrics } from './metrics';
import { DeliveryRecords } from './records';
import { temporalConnectionOptions } from './temporal-connection';
import { serveWorkerEndpoints } from './worker-endpoints';
import { workerOptionsFrom } from './worker-options';
import { installWorkerTelemetry } from './worker-telemetry';

/**
 * `npm run worker`: runs delivery workflows and activities for the task queue the API
 * starts them on. Needs TEMPORAL_ADDRESS and the same database and SECRET_ENCRYPTION_KEYS
 * as the API: DATABASE_URL, or in development the database `npm start` chose (the local
 * PostgreSQL, or the running service's embedded one, which it joins as the CLIs do).
 * Serves the same delivery metrics as the API process on its own `/metrics`, followed by
 * Temporal's SDK metrics, with `/healthz` and `/readyz`, on WORKER_METRICS_PORT.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  const tracing = startTracing(config.tracing, 'publishing-connections-worker', (error) => logger.warn({ err: error }, 'tracing: spans not exported'));
  if (!config.temporal) throw new Error('TEMPORAL_ADDRESS is required for the worker');
  if (!config.databaseUrl && config.env === 'production') throw new Error('DATABASE_URL is required for the worker');
  const database = await resolveDatabaseUrl(config.databaseUrl, logger, { embedded: 'join' });
  const orm = await openDatabase(database);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const records = new DeliveryRecords({ retryIntervalMs: config.delivery.retryIntervalMs, endpointConcurrency: config.delivery.endpointConcurrency });
  const metrics = new DeliveryMetrics(registry, { orm, records });
  const telemetry = await installWorkerTelemetry();
  const connection = await NativeConnection.connect(temporalConnectionOptions(config.temporal));
  let worker: Worker | null = null;
  const server = await serveWorkerEndpoints({ port: config.workerMetricsPort, host: config.host, registry, orm, logger, running: () => worker?.getState() === 'RUNNING', more: telemetry.sdkMetrics });
  try {
    worker = await Worker.create({
      connection,
      namespace: config.temporal.namespace,
      taskQueue: config.temporal.taskQueue,
      ...(await workerOptionsFrom(config.worker)),
      activities: createActivities(activityDepsFromConfig(config, { orm, records, logger, onEvent: metrics.observe })),
      ...workerTracing({ prebuiltBundle: config.worker.workflowBundlePath !== null }),
    });
    logger.info({ taskQueue: config.temporal.taskQueue, metrics: `http://${config.host}:${(server.address() as AddressInfo).port}/metrics` }, 'delivery worker running');
    await worker.run();
  } finally {
    server.close();
    await tracing.shutdown();
    await connection.close();
    await orm.close();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`worker: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
