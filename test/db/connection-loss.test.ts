import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { createTestDatabase } from '../support/databases';
import { startPgProxy, type PgProxy } from '../support/pg-proxy';
import { within } from '../support/within';

/**
 * A transaction (em.transactional, Kysely's controlled transaction underneath) whose
 * connection dies before its ROLLBACK must still give that connection back: otherwise each
 * PostgreSQL outage that catches a transaction open costs the pool one connection for good,
 * and once the pool is empty every query waits forever (src/db/pool-guard.ts).
 */
let proxy: PgProxy;
let orm: MikroORM;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  proxy = await startPgProxy(database.url);
  orm = await openDatabase(databaseAt(proxy.url), { pool: { min: 0, max: 2 } });
});
afterAll(async () => {
  await orm?.close();
  await proxy?.close();
  await drop?.();
});

it('gives its connection back to the pool when the connection dies inside a transaction', async () => {
  const pool = (await orm.driver.getConnection().getNativeClient()) as { totalCount: number; idleCount: number };
  // More outages than the pool has connections: a leak would leave none for the query after them.
  for (let outage = 0; outage < 3; outage++) {
    await expect(
      orm.em.fork().transactional(async (tx) => {
        await tx.execute('select 1');
        proxy.cut();
        await tx.execute('select 2');
      }),
    ).rejects.toThrow();
    proxy.restore();
    // The connection's end is reported a moment after the failed statement; a leaked one never comes back.
    expect(await within(5_000, async () => pool.totalCount - pool.idleCount === 0)).toBe(true);
  }
  await expect(orm.em.fork().execute('select 3 as n')).resolves.toEqual([{ n: 3 }]);
});
