import { randomBytes } from 'node:crypto';
import { migrate, openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { databaseUrl, withAdmin } from '../support/databases';

/**
 * Migrations and entities describe one schema. Queries are typed from the entities
 * (MikroORM and its Kysely), so a column a migration adds or changes without its entity,
 * or a property no migration created, would otherwise surface only as a failing query.
 */
let orm: MikroORM;
let name: string;

interface Column {
  table_name: string;
  column_name: string;
  is_nullable: 'YES' | 'NO';
  udt_name: string;
  character_maximum_length: number | null;
}

/** PostgreSQL's name (udt_name) for each column type the entities declare. */
const UDT_OF: Record<string, string> = {
  uuid: 'uuid',
  text: 'text',
  'text[]': '_text',
  'int[]': '_int4',
  timestamptz: 'timestamptz',
  date: 'date',
  int: 'int4',
  integer: 'int4',
  bigint: 'int8',
  bigserial: 'int8',
  boolean: 'bool',
  bytea: 'bytea',
  jsonb: 'jsonb',
  varchar: 'varchar',
};

beforeAll(async () => {
  // Fresh and empty rather than the suites' template: this is what `npm run migrate` builds.
  name = `publishing_schema_${randomBytes(6).toString('hex')}`;
  await withAdmin(async (client) => void (await client.query(`create database ${name}`)));
  orm = await openDatabase(databaseAt(databaseUrl(name)), { pool: { min: 0, max: 2 } });
  await migrate(orm);
});
afterAll(async () => {
  await orm?.close();
  await withAdmin(async (client) => void (await client.query(`drop database if exists ${name} with (force)`)));
});

async function columns(): Promise<Column[]> {
  return orm.em
    .fork()
    .execute<Column[]>(
      `select c.table_name, c.column_name, c.is_nullable, c.udt_name, c.character_maximum_length
         from information_schema.columns c
         join information_schema.tables t on t.table_schema = c.table_schema and t.table_name = c.table_name
        where c.table_schema = 'public' and t.table_type = 'BASE TABLE' and c.table_name <> 'schema_migrations'
        order by c.table_name, c.ordinal_position`,
    );
}

function entities() {
  return [...orm.getMetadata().getAll().values()].filter((meta) => !meta.embeddable && !meta.virtual && meta.tableName);
}

it('has an entity for every table the migrations create, and no entity without its table', async () => {
  const tables = [...new Set((await columns()).map((c) => c.table_name))].sort();
  expect(entities().map((meta) => meta.tableName).sort()).toEqual(tables);
});

it('maps every column of every table to an entity property, with the same nullability and a compatible type', async () => {
  const stored = new Map((await columns()).map((c) => [`${c.table_name}.${c.column_name}`, c]));
  const mapped = new Set<string>();
  const problems: string[] = [];
  for (const meta of entities()) {
    for (const prop of meta.props) {
      if (prop.persist === false) continue;
      prop.fieldNames.forEach((field, i) => {
        const key = `${meta.tableName}.${field}`;
        mapped.add(key);
        const column = stored.get(key);
        if (!column) return problems.push(`${meta.className}.${prop.name}: no column ${key}`);
        const declared = (prop.columnTypes[i] ?? '').toLowerCase();
        const [, base = declared, length] = /^(\w+(?:\[\])?)(?:\((\d+)\))?$/.exec(declared) ?? [];
        const udt = UDT_OF[base];
        if (!udt) return problems.push(`${meta.className}.${prop.name}: column type ${declared} is not one this test knows; add it to UDT_OF`);
        if (udt !== column.udt_name) problems.push(`${key}: entity says ${declared}, the migrations made ${column.udt_name}`);
        if (length && Number(length) !== column.character_maximum_length) {
          problems.push(`${key}: entity says ${declared}, the migrations made length ${column.character_maximum_length}`);
        }
        const nullable = prop.nullable === true;
        if (nullable !== (column.is_nullable === 'YES')) {
          problems.push(`${key}: entity says ${nullable ? 'nullable' : 'not null'}, the migrations made it ${column.is_nullable === 'YES' ? 'nullable' : 'not null'}`);
        }
      });
    }
  }
  for (const key of stored.keys()) if (!mapped.has(key)) problems.push(`${key}: no entity property maps this column`);
  expect(problems).toEqual([]);
});
