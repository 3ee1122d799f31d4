import { execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { ensureTemporalBinary } from '../../scripts/temporal-server';

/**
 * The production path on the embedded database, as a user runs it: `npm run
 * start:temporal` with no PostgreSQL anywhere (a network namespace of its own, as
 * scripts/newcomer.sh makes one; needs root), the API owning the embedded database and the
 * Temporal worker joining it. 50 publishes at once to an organization with two endpoints
 * make 100 deliveries; every one is delivered, once, signed with its endpoint's secret.
 * The run itself is production-embedded-run.ts, inside the namespace; it reports JSON.
 */
const ROOT = path.resolve(__dirname, '../..');

interface Report {
  publishes: number[];
  rows: { endpointId: string; status: string; attempts: number; lastError: string }[];
  received: { path: string; eventId: string; signed: boolean }[];
}

function runInNamespace(): Promise<Report> {
  const namespace = `production-embedded-${process.pid}`;
  execFileSync('ip', ['netns', 'add', namespace]);
  return new Promise<Report>((resolve, reject) => {
    execFileSync('ip', ['netns', 'exec', namespace, 'ip', 'link', 'set', 'lo', 'up']);
    const child = spawn('ip', ['netns', 'exec', namespace, process.execPath, '--import', 'tsx', path.join(__dirname, 'production-embedded-run.ts')], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => {
      if (code === 0) resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as Report);
      else reject(new Error(`the run in the namespace failed (${code}):\n${stderr}`));
    });
  }).finally(() => execFileSync('ip', ['netns', 'delete', namespace]));
}

it('delivers every one of 100 concurrent deliveries once, signed, on the production path over the embedded database', async () => {
  // Built before the namespace is entered: there, the Go module proxy is out of reach.
  ensureTemporalBinary();
  const report = await runInNamespace();

  expect(report.publishes).toEqual(Array.from({ length: 50 }, () => 200));
  expect(report.rows).toHaveLength(100);
  expect(report.rows.filter((row) => row.status !== 'delivered' || row.attempts !== 1)).toEqual([]);
  const arrivals = new Map<string, number>();
  for (const request of report.received) arrivals.set(`${request.path} ${request.eventId}`, (arrivals.get(`${request.path} ${request.eventId}`) ?? 0) + 1);
  const expected = ['/a', '/b'].flatMap((p) => Array.from({ length: 50 }, (_, i) => `${p} order-${i}`)).sort();
  expect([...arrivals.keys()].sort()).toEqual(expected);
  expect([...arrivals.values()].filter((n) => n !== 1)).toEqual([]);
  expect(report.received.filter((request) => !request.signed)).toEqual([]);
}, 900_000);
