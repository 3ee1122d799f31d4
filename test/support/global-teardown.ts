import { TEMPLATE_ENV, withAdmin } from './databases';

export default async function globalTeardown(): Promise<void> {
  const name = process.env[TEMPLATE_ENV];
  if (name) await withAdmin(async (client) => void (await client.query(`drop database if exists ${name} with (force)`)));
}
