import { loadConfig, createLogger } from '../config';
import { migrateAs } from './orm';
import { resolveDatabaseUrl } from './resolve';

/** `npm run migrate`: applies pending migrations to the configured database. */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  if (config.env === 'production' && !config.databaseMigrationUrl) {
    throw new Error('DATABASE_MIGRATION_URL must be set in production: migrations run as the owner role (README, "Database roles")');
  }
  const database = await resolveDatabaseUrl(config.databaseUrl, logger);
  try {
    const applied = await migrateAs(database, config.databaseMigrationUrl || undefined);
    logger.info({ applied }, applied.length > 0 ? 'migrations applied' : 'database is up to date');
  } finally {
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`migrate: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
