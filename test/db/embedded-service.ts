/**
 * Run by embedded-service.test.ts in its own process (PGlite loads its WebAssembly through a
 * dynamic import that jest's module sandbox cannot run), with no PostgreSQL answering:
 *
 *   <dataDir> <port>   with INTERNAL_SERVICE_TOKENS from the environment, resolves the development database as `npm start` does (embedded PGlite,
 *                      owned), migrates it, opens the service's pool over it and starts the
 *                      service on a free port; bootstraps an organization with an owner's key and
 *                      prints one JSON line: {url, databaseUrl, apiKey, organizationId}. Then per
 *                      line on stdin: "pool" prints how many connections the pool has opened,
 *                      "stop" stops it.
 */
import { createInterface } from 'node:readline';
import type { Pool } from 'pg';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/config/logger';
import { migrateAs, openDatabase, resolveDatabaseUrl } from '../../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import { start } from '../../src/server';

async function main(): Promise<void> {
  const [dataDir, port] = process.argv.slice(2);
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'warn', process.stderr);
  const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);
  const database = await resolveDatabaseUrl('', logger, { dataDir, local: { host: '127.0.0.1', port: Number(port) }, embedded: 'own' });
  let connections = 0;
  try {
    await migrateAs(database);
    const orm = await openDatabase(database, { driverOptions: { onPoolCreated: (pool: Pool) => void pool.on('connect', () => (connections += 1)) } });
    const app = await start({ config: loadConfig({ PORT: '0', HOST: '127.0.0.1', INTERNAL_SERVICE_TOKENS: process.env.INTERNAL_SERVICE_TOKENS }), orm, logger, cachePrincipals: !database.embedded });
    try {
      const em = orm.em.fork();
      const org = await createOrganization(em, { name: 'Embedded', plan: 'scale' });
      const user = await createUser(em, { organizationId: org.id, email: 'owner@example.com', role: 'owner' });
      const key = await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'test', scopes: [...PERMISSIONS] });
      print({ url: app.url, databaseUrl: database.url, apiKey: key.key, organizationId: org.id });
      const lines = createInterface({ input: process.stdin });
      while ((await new Promise((resolve) => lines.once('line', resolve))) !== 'stop') print({ connections });
      lines.close();
    } finally {
      await app.close();
      await orm.close();
    }
  } finally {
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(String(error instanceof Error ? error.stack : error));
  process.exitCode = 1;
});
