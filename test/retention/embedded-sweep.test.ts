import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * The retention sweep and an erasure on the development database default, embedded PGlite
 * (served over the wire protocol to the service's pool, one session for every connection):
 * the same statements as on PostgreSQL, in a process of its own (embedded-sweep-probe.ts).
 */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let root: string;
beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'pglite-retention-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

it('expires payloads and attempts in batches and erases an organization on embedded PGlite', async () => {
  const run = spawnSync(process.execPath, ['--import', 'tsx', path.join(__dirname, 'embedded-sweep-probe.ts'), path.join(root, '.data'), String(await closedPort())], {
    encoding: 'utf8',
    timeout: 110_000,
  });
  expect(run.stderr).toBe('');
  const outcome = JSON.parse(run.stdout.trim().split('\n').at(-1) || '{}');
  const row = (id: string) => outcome.stored.find((r: { id: string }) => r.id === id);
  expect(outcome.pass).toMatchObject({ payloadsExpired: 3, attemptsDeleted: 1 });
  // Batches of 2: three payloads take two statements, and a third finds nothing more.
  expect(outcome.pass.batches).toBeGreaterThanOrEqual(4);
  for (const id of outcome.expired) expect(row(id)).toMatchObject({ payload: '', payload_removed: 'expired', status: 'delivered' });
  expect(row(outcome.expired[2])).toMatchObject({ attempts: 0 });
  expect(row(outcome.expired[0])).toMatchObject({ attempts: 1, excerpts: 1 });
  expect(row(outcome.kept)).toMatchObject({ payload_removed: null, excerpts: 1 });
  expect(outcome.erasure).toEqual({ deliveries: 2, payloads: 2, responseExcerpts: 2, open: 0, eventPayloads: 0 });
  for (const id of outcome.erased) expect(row(id)).toMatchObject({ payload: '', payload_removed: 'erased', status: 'delivered', attempts: 1, excerpts: 0 });
}, 120_000);
