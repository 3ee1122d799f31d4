import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
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

/** One process per probe (tsx as a loader, not a parent process), so its pid is the probe's. */
const PROBE = ['--import', 'tsx', path.join(__dirname, 'embedded-probe.ts')];

/** One probe run to its end; its last stdout line parsed. */
function probe(mode: string, dataDir: string, port: number): { stderr: string; outcome: any } {
  const run = spawnSync(process.execPath, [...PROBE, mode, dataDir, String(port)], { encoding: 'utf8', timeout: 100_000 });
  return { stderr: run.stderr, outcome: JSON.parse(run.stdout.trim().split('\n').at(-1) || '{}') };
}

describe('the development database default', () => {
  let root: string;
  let port: number;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), 'pglite-'));
    port = await closedPort();
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  /**
   * One owner, started as the service starts, serves every case that only needs an owner
   * running: starting PGlite on a fresh directory is most of what a case costs. The last
   * cases stop it, and find the directory as a stopped or a dead owner leaves it.
   */
  describe('while a process owns it', () => {
    let dataDir: string;
    let owner: ChildProcessWithoutNullStreams;
    let ready: any;
    let ownerStderr = '';
    let next: () => Promise<any>;

    beforeAll(async () => {
      // A fresh checkout has no .data yet.
      dataDir = path.join(root, 'owned', '.data');
      owner = spawn(process.execPath, [...PROBE, 'serve', dataDir, String(port)]);
      owner.stderr.on('data', (chunk: Buffer) => (ownerStderr += chunk.toString('utf8')));
      const lines = createInterface({ input: owner.stdout });
      next = () => new Promise<any>((resolve, reject) => {
        lines.once('line', (line) => resolve(JSON.parse(line)));
        owner.once('exit', (code) => reject(new Error(`the owner exited with ${code}: ${ownerStderr}`)));
      });
      ready = await next();
    }, 120_000);
    afterAll(() => {
      owner?.kill('SIGKILL');
    });

    /** Stops the owner as the service stops, once; the cases after it find the directory unowned. */
    async function stop(): Promise<void> {
      if (owner.exitCode !== null || owner.signalCode !== null) return;
      const exited = new Promise((resolve) => owner.once('exit', resolve));
      owner.stdin.write('stop\n');
      await exited;
    }

    it('falls back to embedded PGlite when no PostgreSQL answers, creating its directory, and runs the migrations on it', () => {
      expect(ready).toMatchObject({ ready: true, pid: owner.pid });
      expect(ready.messages).toContain('no DATABASE_URL and no local PostgreSQL: using embedded PGlite');
      expect(ready.applied).toEqual(MIGRATION_NAMES);
      expect(ready.rows).toEqual([{ n: 0 }]);
      expect(ownerStderr).toBe('');
    });

    it('lets other processes use the running owner\'s database', async () => {
      const joined = probe('join', dataDir, port);
      expect(joined.stderr).toBe('');
      expect(joined.outcome.messages).toContain('no DATABASE_URL and no local PostgreSQL: using the embedded PGlite served by another process');
      // What the other process wrote is in the owner's database.
      const seen = next();
      owner.stdin.write('report\n');
      expect(await seen).toEqual({ organizations: ['Joined'] });
    }, 120_000);

    it('refuses a second owner', () => {
      const second = probe('own', dataDir, port);
      expect(second.outcome.refused).toMatch(new RegExp(`is in use by process ${owner.pid}; stop that process first, or set DATABASE_URL`));
    }, 120_000);

    it('keeps counting the webhook bucket after the pool replaced an idle connection on the one PGlite session', () => {
      const { stderr, outcome } = probe('limiter', dataDir, port);
      expect(stderr).toBe('');
      expect(outcome.remaining).toEqual(['299', '298']);
    }, 120_000);

    it('removes its lock when it stops', async () => {
      await stop();
      expect(owner.exitCode).toBe(0);
      expect(ownerStderr).toBe('');
      expect(existsSync(path.join(dataDir, 'pglite.lock'))).toBe(false);
    }, 120_000);

    it('is taken over by the next process when its owner died without removing the lock', async () => {
      await stop();
      const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
      writeFileSync(path.join(dataDir, 'pglite.lock'), JSON.stringify({ pid: Number(dead.stdout), address: '127.0.0.1:1' }));
      const { stderr, outcome } = probe('migrate', dataDir, port);
      expect(stderr).toBe('');
      expect(outcome.messages).toContain('no DATABASE_URL and no local PostgreSQL: using embedded PGlite');
      // The dead owner's database, migrated already.
      expect(outcome.applied).toEqual([]);
      expect(outcome.rows).toEqual([{ n: 0 }]);
      expect(existsSync(path.join(dataDir, 'pglite.lock'))).toBe(false);
    }, 120_000);
  });

  it('uses DATABASE_URL as given when it is set', async () => {
    const logger = pino({ level: 'silent' });
    const database = await resolveDatabaseUrl('postgres://someone@db.example:5432/app', logger);
    expect(database.url).toBe('postgres://someone@db.example:5432/app');
  });
});
