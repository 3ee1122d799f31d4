import { MikroORM, type EntityManager, type Options } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { ENTITIES } from './entities';
import { Migration20261121000000Initial } from './migrations/Migration20261121000000Initial';
import { Migration20261121000001PrincipalNotices } from './migrations/Migration20261121000001PrincipalNotices';
import { Migration20261124000000DeliveryAttemptDispatch } from './migrations/Migration20261124000000DeliveryAttemptDispatch';
import { Migration20261124200000Events } from './migrations/Migration20261124200000Events';

export type { EntityManager };
export { MikroORM };

/** Migrations in order. Listed explicitly so the same list runs under tsx, jest and a bundle. */
const MIGRATIONS = [
  { name: 'Migration20261121000000Initial', class: Migration20261121000000Initial },
  { name: 'Migration20261121000001PrincipalNotices', class: Migration20261121000001PrincipalNotices },
  { name: 'Migration20261124000000DeliveryAttemptDispatch', class: Migration20261124000000DeliveryAttemptDispatch },
  { name: 'Migration20261124200000Events', class: Migration20261124200000Events },
];

export function ormOptions(clientUrl: string, extra: Partial<Options> = {}): Options {
  return {
    clientUrl,
    entities: ENTITIES,
    extensions: [Migrator],
    // Timestamps are instants; the pool's sessions speak UTC so nothing depends on the host's zone.
    timezone: 'Z',
    forceUtcTimezone: true,
    // The embedded engine works on 16 deliveries at once next to the API's calls.
    pool: { min: 0, max: 20 },
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
  };
}

export async function openDatabase(clientUrl: string, extra: Partial<Options> = {}): Promise<MikroORM> {
  return MikroORM.init(ormOptions(clientUrl, extra));
}

/** Applies pending migrations; returns the names applied. */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}
