/**
 * Run by embedded.test.ts in its own process (PGlite loads its WebAssembly through a dynamic
 * import that jest's module sandbox cannot run): resolves the development database with no
 * PostgreSQL answering, migrates it, and prints what happened as one JSON line.
 */
import pino from 'pino';
import { openDatabase, migrate, resolveDatabaseUrl } from '../../src/db';

async function main(): Promise<void> {
  const [dataDir, port] = process.argv.slice(2);
  const messages: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void messages.push((JSON.parse(line) as { msg: string }).msg) });
  const database = await resolveDatabaseUrl('', logger, dataDir!, { host: '127.0.0.1', port: Number(port) });
  const orm = await openDatabase(database.url, { pool: { min: 0, max: database.poolMax } });
  try {
    const applied = await migrate(orm);
    const rows = await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from webhook_deliveries');
    process.stdout.write(`${JSON.stringify({ messages, applied, rows })}\n`);
  } finally {
    await orm.close();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(String(error instanceof Error ? error.stack : error));
  process.exit(1);
});
