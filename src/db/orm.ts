import { LockMode, MikroORM, type EntityManager, type Options } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import type { Pool } from 'pg';
import { ENTITIES } from './entities';
import { releaseDeadCheckouts } from './pool-guard';
import { sendPreparedStatements } from './prepared';
import { Migration20261121000000Initial } from './migrations/Migration20261121000000Initial';
import { Migration20261121000001PrincipalNotices } from './migrations/Migration20261121000001PrincipalNotices';
import { Migration20261124000000DeliveryAttemptDispatch } from './migrations/Migration20261124000000DeliveryAttemptDispatch';
import { Migration20261124100000ServiceRole } from './migrations/Migration20261124100000ServiceRole';
import { Migration20261124110000ConnectionsTable } from './migrations/Migration20261124110000ConnectionsTable';
import { Migration20261124200000Events } from './migrations/Migration20261124200000Events';
import { Migration20261126000000DeliveryRecovery } from './migrations/Migration20261126000000DeliveryRecovery';
import { Migration20261126000000EndpointPause } from './migrations/Migration20261126000000EndpointPause';
import { Migration20261126000000SigningSchemes } from './migrations/Migration20261126000000SigningSchemes';
import { Migration20261127100000EndpointTurns } from './migrations/Migration20261127100000EndpointTurns';
import { Migration20261127200000PortalSessions } from './migrations/Migration20261127200000PortalSessions';
import { Migration20261127300000Retention } from './migrations/Migration20261127300000Retention';
import { Migration20261128000000EndpointStatistics } from './migrations/Migration20261128000000EndpointStatistics';

export type { EntityManager };
export { LockMode, MikroORM };

/** Migrations in order. Listed explicitly so the same list runs under tsx, jest and a bundle. */
const MIGRATIONS = [
  { name: 'Migration20261121000000Initial', class: Migration20261121000000Initial },
  { name: 'Migration20261121000001PrincipalNotices', class: Migration20261121000001PrincipalNotices },
  { name: 'Migration20261124000000DeliveryAttemptDispatch', class: Migration20261124000000DeliveryAttemptDispatch },
  { name: 'Migration20261124100000ServiceRole', class: Migration20261124100000ServiceRole },
  { name: 'Migration20261124110000ConnectionsTable', class: Migration20261124110000ConnectionsTable },
  { name: 'Migration20261124200000Events', class: Migration20261124200000Events },
  { name: 'Migration20261126000000DeliveryRecovery', class: Migration20261126000000DeliveryRecovery },
  { name: 'Migration20261126000000EndpointPause', class: Migration20261126000000EndpointPause },
  { name: 'Migration20261126000000SigningSchemes', class: Migration20261126000000SigningSchemes },
  { name: 'Migration20261127100000EndpointTurns', class: Migration20261127100000EndpointTurns },
  { name: 'Migration20261127200000PortalSessions', class: Migration20261127200000PortalSessions },
  { name: 'Migration20261127300000Retention', class: Migration20261127300000Retention },
  { name: 'Migration20261128000000EndpointStatistics', class: Migration20261128000000EndpointStatistics },
];

/**
 * Pool connections per process. A connection is held only while statements run: nothing
 * that waits on the network (the managed-OAuth provider, webhook receivers, Temporal) runs
 * inside a transaction, so the embedded engine's 16 concurrent deliveries and the API's
 * calls share 10 without queueing behind one another. Each instance also opens 2 for the
 * rate limiter and 1 to listen for principal notices: 13 per instance in all.
 */
export const POOL_SIZE = 10;

/** Every migration's name, in the order they run. */
export const MIGRATION_NAMES = MIGRATIONS.map((m) => m.name);

/**
 * A database a process may open: where it is, and what its server gives each connection.
 * resolveDatabaseUrl finds the service's (DATABASE_URL, the local PostgreSQL or the embedded
 * one); databaseAt names a PostgreSQL directly (a test's database, the bench's).
 */
export interface Database {
  /** Where the service connects: as the service role when the development default set the roles up. */
  url: string;
  /** Where migrations run (as the owner role); DATABASE_MIGRATION_URL, when set, goes before it. */
  migrationUrl: string;
  /** Pool size the database can take (the embedded server serves a few connections only). */
  poolMax: number;
  /**
   * True for the embedded PGlite server: one session behind every connection. A named
   * prepared statement belongs to a session, so where connections share one the second to
   * prepare a name finds it taken (42P05): openDatabase sends none there.
   */
  embedded: boolean;
  /** Stops what was started for the database (the embedded server), if anything. */
  stop(): Promise<void>;
}

/** A PostgreSQL at `url` that gives every connection a session of its own. */
export function databaseAt(url: string, migrationUrl = url): Database {
  return { url, migrationUrl, poolMax: POOL_SIZE, embedded: false, stop: async () => undefined };
}

function ormOptions(clientUrl: string, extra: Partial<Options>, namedStatements: boolean): Options {
  return {
    clientUrl,
    entities: ENTITIES,
    extensions: [Migrator],
    // Timestamps are instants; the pool's sessions speak UTC so nothing depends on the host's zone.
    timezone: 'Z',
    forceUtcTimezone: true,
    pool: { min: 0, max: POOL_SIZE },
    debug: false,
    allowGlobalContext: false,
    // A flush of one statement needs no BEGIN/COMMIT round trips; everything that writes
    // more than one row together runs in an explicit em.transactional().
    implicitTransactions: false,
    migrations: {
      migrationsList: MIGRATIONS,
      tableName: 'schema_migrations',
      transactional: true,
      allOrNothing: true,
      snapshot: false,
      silent: true,
    },
    ...extra,
    // Without a bound, a call waits for a connection as long as the kernel keeps trying to
    // reach an unreachable server (minutes); past it the call is answered UNAVAILABLE.
    driverOptions: { connectionTimeoutMillis: 5_000, ...extra.driverOptions, onPoolCreated: poolHooks(extra.driverOptions?.onPoolCreated, namedStatements) },
  };
}

/** The pool's own hooks, then the caller's (a test that watches the statements sent, say). */
function poolHooks(extra: unknown, namedStatements: boolean): (pool: Pool) => void {
  return (pool) => {
    releaseDeadCheckouts(pool);
    if (namedStatements) sendPreparedStatements(pool);
    if (typeof extra === 'function') (extra as (pool: Pool) => void)(pool);
  };
}

/**
 * The one way every process opens the database (the API, the worker, the CLIs, the bench,
 * the fault script): the pool sized for the server behind it, and named prepared statements
 * only where each connection is a session of its own (not on the embedded server).
 * `extra`: more ORM options (a pool size of its own, a test's pool hook).
 */
export async function openDatabase(database: Database, extra: Partial<Options> = {}): Promise<MikroORM> {
  return MikroORM.init(ormOptions(database.url, { pool: { min: 0, max: database.poolMax }, ...extra }, !database.embedded));
}

/** Applies pending migrations; returns the names applied. */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}

/**
 * Applies pending migrations over a connection of their own to `url` (the database's
 * migrationUrl unless DATABASE_MIGRATION_URL names another), which logs in as the owner
 * role: the service's pool never has the owner's rights.
 */
export async function migrateAs(database: Database, url = database.migrationUrl): Promise<string[]> {
  const orm = await openDatabase({ ...database, url }, { pool: { min: 0, max: 1 } });
  try {
    return await migrate(orm);
  } finally {
    await orm.close();
  }
}
