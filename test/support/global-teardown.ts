import { rm } from 'node:fs/promises';
import { TEMPLATE_ENV, withAdmin, workflowBundleDir } from './databases';
import { stopTestTemporal } from './temporal';

export default async function globalTeardown(): Promise<void> {
  await stopTestTemporal();
  const name = process.env[TEMPLATE_ENV];
  if (!name) return;
  await withAdmin(async (client) => void (await client.query(`drop database if exists ${name} with (force)`)));
  await rm(workflowBundleDir(), { recursive: true, force: true });
}
