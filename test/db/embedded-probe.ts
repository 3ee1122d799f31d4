/**
 * Run by embedded.test.ts in its own process (PGlite loads its WebAssembly through a dynamic
 * import that jest's module sandbox cannot run), with no PostgreSQL answering:
 *
 *   migrate <dataDir> <port>   resolves the development database, migrates it, prints one JSON line
 *   serve <dataDir> <port>     as the service does: owns it, migrates it, prints {"ready":true,"pid":...} with
 *                              what migrate prints; then per line on stdin: "report" prints the
 *                              organizations it sees, "stop" stops it
 *   join <dataDir> <port>      as a CLI does while the service runs: writes an organization
 *   own <dataDir> <port>       as a second service would: prints the refusal
 *   limiter <dataDir> <port>   takes from the webhook bucket, lets the pool drop its idle
 *                              connection, and takes again
 */
import { createInterface } from 'node:readline';
import { Pool } from 'pg';
import pino from 'pino';
import { openDatabase, migrate, resolveDatabaseUrl, OrganizationSchema } from '../../src/db';

async function main(): Promise<void> {
  const [mode, dataDir, port] = process.argv.slice(2);
  const messages: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void messages.push((JSON.parse(line) as { msg: string }).msg) });
  const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);
  const local = { host: '127.0.0.1', port: Number(port) };
  if (mode === 'own') {
    await resolveDatabaseUrl('', logger, { dataDir, local, embedded: 'own' }).then(
      () => print({ refused: null }),
      (error: unknown) => print({ refused: String(error instanceof Error ? error.message : error) }),
    );
    return;
  }
  const database = await resolveDatabaseUrl('', logger, { dataDir, local, embedded: mode === 'serve' ? 'own' : 'join' });
  const orm = await openDatabase(database);
  try {
    const applied = await migrate(orm);
    const migrated = async () => ({
      messages,
      applied,
      rows: await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from webhook_deliveries'),
    });
    if (mode === 'migrate') {
      print(await migrated());
    } else if (mode === 'serve') {
      print({ ready: true, pid: process.pid, ...(await migrated()) });
      const lines = createInterface({ input: process.stdin });
      while ((await new Promise((resolve) => lines.once('line', resolve))) !== 'stop') {
        const organizations = await orm.em.fork().find(OrganizationSchema, {});
        print({ organizations: organizations.map((o) => o.name) });
      }
      lines.close();
    } else if (mode === 'join') {
      // Loaded by the mode that uses it only: each mode is a process of its own, which loading
      // src/auth or src/webhooks would keep busy longer than the mode itself.
      const { createOrganization } = await import('../../src/auth');
      await createOrganization(orm.em.fork(), { name: 'Joined', plan: 'scale' });
      print({ messages });
    } else if (mode === 'limiter') {
      const pool = new Pool({ connectionString: database.url, max: 1, idleTimeoutMillis: 10 });
      const { WebhookRateLimiter } = await import('../../src/webhooks');
      const limiter = new WebhookRateLimiter(pool);
      const first = await limiter.take('org');
      // The idle connection goes; the next take runs on a new one, on the same PGlite session.
      await new Promise((resolve) => pool.once('remove', resolve));
      const second = await limiter.take('org');
      await pool.end();
      print({ remaining: [first.headers['ratelimit-remaining'], second.headers['ratelimit-remaining']] });
    }
  } finally {
    await orm.close();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(String(error instanceof Error ? error.stack : error));
  process.exitCode = 1;
});
