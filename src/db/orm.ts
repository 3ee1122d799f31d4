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
import { Migration20261127300000Retention } from './migrations/Migration20261127300000Retention';

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
  { name: 'Migration20261127300000Retention', class: Migration20261127300000Retention },
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

/** What the server behind a URL gives each pooled connection. */
export interface SessionOptions {
  /**
   * Whether registered statements go out as named prepared statements (default true). A
   * name belongs to a database session, so this holds only where every pooled connection is
   * a session of its own: not behind the embedded PGlite server (one session for all) nor a
   * proxy that pools transactions (PgBouncer in transaction mode), where the second
   * connection to prepare a name finds it taken.
   */
  namedStatements?: boolean;
}

export function ormOptions(clientUrl: string, extra: Partial<Options> = {}, session: SessionOptions = {}): Options {
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
    driverOptions: { connectionTimeoutMillis: 5_000, ...extra.driverOptions, onPoolCreated: poolHooks(extra.driverOptions?.onPoolCreated, session.namedStatements ?? true) },
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

export async function openDatabase(clientUrl: string, extra: Partial<Options> = {}, session: SessionOptions = {}): Promise<MikroORM> {
  return MikroORM.init(ormOptions(clientUrl, extra, session));
}

/** Applies pending migrations; returns the names applied. */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}

/**
 * Applies pending migrations over a connection of their own to `url`, which logs in as the
 * owner role (DATABASE_MIGRATION_URL): the service's pool never has the owner's rights.
 */
export async function migrateAs(url: string): Promise<string[]> {
  const orm = await openDatabase(url, { pool: { min: 0, max: 1 } });
  try {
    return await migrate(orm);
  } finally {
    await orm.close();
  }
}
