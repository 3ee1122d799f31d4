import { NativeConnection, Worker } from '@temporalio/worker';
import { loadConfig } from '../config';
import { createLogger } from '../config/logger';
import { openDatabase } from '../db';
import { activitiesFromConfig } from './activities';

/**
 * `npm run worker`: runs delivery workflows and activities for the task queue the API
 * starts them on. Needs TEMPORAL_ADDRESS and the same DATABASE_URL and
 * SECRET_ENCRYPTION_KEYS as the API.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  if (!config.temporal) throw new Error('TEMPORAL_ADDRESS is required for the worker');
  if (!config.databaseUrl) throw new Error('DATABASE_URL is required for the worker');
  const orm = await openDatabase(config.databaseUrl);
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  try {
    const worker = await Worker.create({
      connection,
      namespace: config.temporal.namespace,
      taskQueue: config.temporal.taskQueue,
      workflowsPath: require.resolve('../../workflows'),
      activities: activitiesFromConfig(config, { orm, logger }),
    });
    logger.info({ taskQueue: config.temporal.taskQueue }, 'delivery worker running');
    await worker.run();
  } finally {
    await connection.close();
    await orm.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`worker: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
