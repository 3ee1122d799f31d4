import { loadConfig } from '../config';
import { createLogger } from '../config/logger';
import { openDatabase, migrate } from './orm';
import { resolveDatabaseUrl } from './resolve';

/** `npm run migrate`: applies pending migrations to the configured database. */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  const database = await resolveDatabaseUrl(config.databaseUrl, logger);
  const orm = await openDatabase(database.url, { pool: { min: 0, max: 1 } });
  try {
    const applied = await migrate(orm);
    logger.info({ applied }, applied.length > 0 ? 'migrations applied' : 'database is up to date');
  } finally {
    await orm.close();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`migrate: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
