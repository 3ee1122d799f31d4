import { openDatabase, migrate } from '../../src/db/orm';
import { TEMPLATE_ENV, databaseUrl, withAdmin } from './databases';

/** Migrates a fresh template database once per run; each test file clones it. */
export default async function globalSetup(): Promise<void> {
  const name = `publishing_test_template_${process.pid}`;
  await withAdmin(async (client) => {
    await client.query(`drop database if exists ${name} with (force)`);
    await client.query(`create database ${name}`);
  });
  const orm = await openDatabase(databaseUrl(name), { pool: { min: 0, max: 1 } });
  try {
    await migrate(orm);
  } finally {
    await orm.close();
  }
  process.env[TEMPLATE_ENV] = name;
}
