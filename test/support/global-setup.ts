import { ensureChromium } from '../../scripts/chromium';
import { databaseAt, migrateAs } from '../../src/db/orm';
import { OWNER_ROLE, ensureServiceRoles } from '../../src/db/roles';
import { TEMPLATE_ENV, databaseUrl, withAdmin } from './databases';
import { bundleProductionWorkflows, startTestTemporal } from './temporal';

/**
 * Creates the owner and service roles (cluster-wide; other runs may be creating them at
 * the same moment) and migrates a fresh template database as the owner, once per run;
 * each test file clones it. Starts the run's Temporal development server for the live
 * suites (test/support/temporal.ts). Debian's Chromium, for the browser suites, is installed
 * when missing and the user may; otherwise the run stops here with the command to run.
 */
export default async function globalSetup(): Promise<void> {
  ensureChromium();
  const name = `publishing_test_template_${process.pid}`;
  await withAdmin(async (client) => {
    await ensureServiceRoles(client, { login: true });
    await client.query(`drop database if exists ${name} with (force)`);
    await client.query(`create database ${name} owner ${OWNER_ROLE}`);
  });
  await migrateAs(databaseAt(databaseUrl(name, OWNER_ROLE)));
  process.env[TEMPLATE_ENV] = name;
  await Promise.all([startTestTemporal(), bundleProductionWorkflows()]);
}
