import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { spawnSync } from 'node:child_process';
import { resolveDatabaseUrl } from '../../src/db';
import { MIGRATION_NAMES } from '../../src/db/orm';

/** A port nothing listens on: taken and released, so "no local PostgreSQL" is real. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('the development database default', () => {
  it('falls back to embedded PGlite when no PostgreSQL answers, says so, and runs the migrations on it', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'pglite-'));
    try {
      const run = spawnSync(process.execPath, [require.resolve('tsx/cli'), path.join(__dirname, 'embedded-probe.ts'), dataDir, String(await closedPort())], {
        encoding: 'utf8',
        timeout: 100_000,
      });
      expect(run.stderr).toBe('');
      const outcome = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '{}');
      expect(outcome.messages).toContain('no DATABASE_URL and no local PostgreSQL: using embedded PGlite');
      expect(outcome.applied).toEqual(MIGRATION_NAMES);
      expect(outcome.rows).toEqual([{ n: 0 }]);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);

  it('uses DATABASE_URL as given when it is set', async () => {
    const logger = pino({ level: 'silent' });
    const database = await resolveDatabaseUrl('postgres://someone@db.example:5432/app', logger);
    expect(database.url).toBe('postgres://someone@db.example:5432/app');
  });
});
