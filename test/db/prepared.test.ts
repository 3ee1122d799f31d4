import { CompiledQuery, sql, type Kysely } from 'kysely';
import { CompiledStatement, openDatabase, prepareStatement, type MikroORM, databaseAt } from '../../src/db';
import { createTestDatabase } from '../support/databases';

/**
 * A registered statement text goes out as a named prepared statement, parsed once per
 * connection (src/db/prepared.ts); any other text stays unnamed. One connection, so that
 * pg_prepared_statements (which lists the session's own) is read where both ran.
 *
 * A CompiledStatement (src/db/compiled-statement.ts) is built once with stand-ins for its
 * values: it refuses a builder that computes with a value instead of placing it, one that
 * reads a value it never places, and an execution that leaves a value out (which would go
 * to PostgreSQL as NULL).
 */
let orm: MikroORM;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 1 } });
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

describe('CompiledStatement', () => {
  type Tables = Record<string, never>;
  const k = () => orm.em.fork().getKysely<Tables>();

  it('runs the statement compiled once with each execution its own values', async () => {
    const statement = new CompiledStatement((_db: Kysely<Tables>, p: { a: number; b: string | null }) => sql<{ n: number; s: string | null }>`select ${p.a}::int + 1 as n, ${p.b}::text as s`);
    expect(await statement.execute(k(), { a: 1, b: 'x' })).toEqual([{ n: 2, s: 'x' }]);
    expect(await statement.execute(k(), { a: 41, b: null })).toEqual([{ n: 42, s: null }]);
  });

  it('refuses an execution that leaves a value out, and sends nothing', async () => {
    const statement = new CompiledStatement((_db: Kysely<Tables>, p: { a: number; b?: number }) => sql<{ n: number }>`select ${p.a}::int + ${p.b}::int as n`);
    await expect(statement.execute(k(), { a: 1 })).rejects.toThrow('No value for "b" of a compiled statement.');
    expect(await statement.execute(k(), { a: 1, b: 2 })).toEqual([{ n: 3 }]);
  });

  it('refuses a builder that computes with a value instead of placing it', async () => {
    const statement = new CompiledStatement((_db: Kysely<Tables>, p: { limit: number }) => sql<{ n: number }>`select ${sql.lit(p.limit + 1)} as n`);
    await expect(statement.execute(k(), { limit: 1 })).rejects.toThrow('"limit" was computed with while the statement was built');
  });

  it('refuses a builder that reads a value and does not place it', async () => {
    const statement = new CompiledStatement((_db: Kysely<Tables>, p: { a: number; b: number }) => {
      void p.b;
      return sql<{ n: number }>`select ${p.a}::int as n`;
    });
    await expect(statement.execute(k(), { a: 1, b: 2 })).rejects.toThrow('read "b" but did not place it as a parameter');
  });
});
