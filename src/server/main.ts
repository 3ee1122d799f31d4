import { loadConfig, ConfigError, createLogger } from '../config';
import { migrateAs, openDatabase, resolveDatabaseUrl, serviceRoleProblems, EmbeddedDatabaseBusyError } from '../db';
import { start } from './app';

/** Entry point: `npm start`. Migrations run at start except in production, where `npm run migrate` does. */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);
  const database = await resolveDatabaseUrl(config.databaseUrl, logger, { embedded: 'own' });
  if (config.env !== 'production') {
    const applied = await migrateAs(database, config.databaseMigrationUrl || undefined);
    if (applied.length > 0) logger.info({ applied }, 'migrations applied');
  }
  const orm = await openDatabase(database);
  // PGlite has one user; on PostgreSQL a role that could rewrite the audit trail is refused in production.
  const roleProblems = database.embedded ? [] : await serviceRoleProblems(orm.em.fork());
  if (roleProblems.length > 0 && config.env === 'production') {
    process.stderr.write(`DATABASE_URL must log in as the service role (README, "Database roles"):\n  - ${roleProblems.join('\n  - ')}\n`);
    await orm.close();
    process.exit(2);
  }
  if (roleProblems.length > 0) logger.warn({ problems: roleProblems }, 'the database role can rewrite the audit trail; production refuses it');
  const app = await start({ config, orm, logger, cachePrincipals: !database.embedded });

  let stopping = false;
  // SIGTERM (an orchestrator's stop) drains first, so that load balancers stop sending here
  // before the listener stops accepting; SIGINT (Ctrl-C at a terminal) stops at once.
  const stop = async (signal: string, drainMs: number) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, drainMs }, 'shutting down');
    await app.close(drainMs);
    await orm.close();
    await database.stop();
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM', config.shutdownDrainMs));
  process.on('SIGINT', () => void stop('SIGINT', 0));
}

main().catch((error: unknown) => {
  if (error instanceof EmbeddedDatabaseBusyError) {
    process.stderr.write(`failed to start: ${error.message}\n`);
    process.exit(1);
  }
  process.stderr.write(`failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
