import { CompiledQuery, sql } from 'kysely';
import { openDatabase, prepareStatement, type MikroORM } from '../../src/db';
import { createTestDatabase } from '../support/databases';

/**
 * A registered statement text goes out as a named prepared statement, parsed once per
 * connection (src/db/prepared.ts); any other text stays unnamed. One connection, so that
 * pg_prepared_statements (which lists the session's own) is read where both ran.
 */
let orm: MikroORM;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  orm = await openDatabase(database.url, { pool: { min: 0, max: 1 } });
});
afterAll(async () => {
  await orm?.close();
  await drop?.();
});

it('prepares a registered statement once per connection, with each execution its own values, and leaves others unnamed', async () => {
  const k = orm.em.fork().getKysely();
  const registered = 'select $1::int + 2 as n';
  prepareStatement(registered);
  const run = async (text: string, value: number) => (await k.executeQuery<{ n: number }>(CompiledQuery.raw(text, [value]))).rows[0]!.n;
  expect(await run(registered, 1)).toBe(3);
  expect(await run(registered, 40)).toBe(42);
  const other = 'select $1::int * 2 as n';
  expect(await run(other, 21)).toBe(42);
  const { rows } = await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(k);
  expect(rows.map((r) => r.statement)).toEqual([registered]);
});
