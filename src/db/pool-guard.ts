import type { Pool, PoolClient } from 'pg';

const GUARDED = Symbol('release guarded');

/**
 * Gives a pool connection back when it dies while checked out. Kysely's controlled
 * transactions (under em.transactional) release their connection only after a BEGIN,
 * COMMIT or ROLLBACK that succeeded; when PostgreSQL goes away mid-transaction none of
 * them does, and without this each outage would cost the pool a connection for good,
 * until every query waited forever. Releasing is also made idempotent, so whoever
 * releases later (Kysely, after all) does no harm.
 */
export function releaseDeadCheckouts(pool: Pool): void {
  pool.on('acquire', (client: PoolClient & { [GUARDED]?: true }) => {
    if (client[GUARDED]) return;
    client[GUARDED] = true;
    let release: PoolClient['release'] | undefined;
    let released = true;
    // pg-pool assigns a fresh release function at every checkout, right after 'acquire'.
    Object.defineProperty(client, 'release', {
      configurable: true,
      get: () => release,
      set: (next: PoolClient['release']) => {
        released = false;
        release = (error?: Error | boolean) => {
          if (released) return;
          released = true;
          next(error);
        };
      },
    });
    client.on('end', () => {
      if (!released) release?.(new Error('the connection ended while it was checked out'));
    });
  });
}
