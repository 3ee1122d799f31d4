import { openDatabase, type MikroORM } from '../../src/db';
import { createTestDatabase } from '../support/databases';
import { startPgProxy, type PgProxy } from '../support/pg-proxy';

/**
 * Known defect, pinned so that it shows when it is fixed: a transaction (em.transactional,
 * Kysely's controlled transaction underneath) whose connection dies before its ROLLBACK never
 * releases that connection, so each PostgreSQL outage that catches a transaction open costs
 * the pool one connection for good, and once the pool is empty every query waits forever.
 * When this test starts failing, the leak is gone: make it an ordinary `it`.
 */
let proxy: PgProxy;
let orm: MikroORM;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  proxy = await startPgProxy(database.url);
  orm = await openDatabase(proxy.url, { pool: { min: 0, max: 2 } });
});
afterAll(async () => {
  // The leaked connections are dead; the pool's end would wait for them forever.
  await Promise.race([orm?.close(), new Promise((resolve) => setTimeout(resolve, 2000).unref())]);
  await proxy?.close();
  await drop?.();
});

it.failing('gives its connection back to the pool when the connection dies inside a transaction', async () => {
  const pool = (await orm.driver.getConnection().getNativeClient()) as { totalCount: number; idleCount: number };
  await expect(
    orm.em.fork().transactional(async (tx) => {
      await tx.execute('select 1');
      proxy.cut();
      await tx.execute('select 2');
    }),
  ).rejects.toThrow();
  proxy.restore();
  expect(pool.totalCount - pool.idleCount).toBe(0);
});
