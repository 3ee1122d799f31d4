/**
 * Fault injection: `npm run faults`. Runs the service as real child processes against
 * its own database and injects what production will do to it:
 *   1. receiver faults: 500, timeout, connection reset, slow drip, redirect, TLS failure;
 *   2. the service killed with SIGKILL in the middle of retries, then restarted;
 *   3. PostgreSQL restarted under a running service (needs pg_ctlcluster; skipped, and
 *      said so, where the cluster cannot be restarted);
 *   4. two service instances taking 1,000 concurrent test calls.
 * It prints what it injected and what it found, and exits non-zero when a delivery was
 * lost, sent twice for one attempt, or counted wrong. Traffic stays on 127.0.0.1.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { Client } from 'pg';
import { openDatabase, migrate } from '../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../src/auth';
import { makeTestTls } from '../test/support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../test/support/https-receiver';
import { serviceNodeFlags } from './service-node-flags';

const ROOT = path.resolve(__dirname, '..');
const ADMIN_URL = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
// Its own name each run, so a service left over from an interrupted run cannot touch it.
const DATABASE = `publishing_faults_${process.pid}`;
const DATABASE_URL = Object.assign(new URL(ADMIN_URL), { pathname: `/${DATABASE}` }).toString();
const TERMINAL = ['delivered', 'dead_lettered', 'failed'];

const violations: string[] = [];
const counts = { faultsInjected: 0, deliveries: 0, lost: 0, sentTwice: 0 };

function check(ok: boolean, message: string): void {
  if (!ok) violations.push(message);
  console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${message}`);
}

async function sql<T = Record<string, unknown>>(text: string, params: unknown[] = [], url = DATABASE_URL): Promise<T[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

interface Service {
  url: string;
  process: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** The last lines every service printed, shown when the script fails, so a failure explains itself. */
const serviceOutput: string[] = [];
function keepOutput(name: string, stream: NodeJS.ReadableStream): void {
  let partial = '';
  stream.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) serviceOutput.push(`[${name}] ${line}`);
    serviceOutput.splice(0, Math.max(0, serviceOutput.length - 60));
  });
}
let servicesStarted = 0;

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

async function startService(env: Record<string, string>): Promise<Service> {
  const child = spawn(process.execPath, [require.resolve('tsx/cli'), ...serviceNodeFlags(ROOT), 'src/server/main.ts'], {
    cwd: ROOT,
    env: { ...process.env, NODE_ENV: 'test', PORT: '0', LOG_LEVEL: 'info', DATABASE_URL, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const name = `service ${++servicesStarted} pid ${child.pid}`;
  keepOutput(name, child.stdout!);
  keepOutput(name, child.stderr!);
  let stopping = false;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    if (!stopping) serviceOutput.push(`[${name}] exited unexpectedly (code ${code}, signal ${signal})`);
  });
  child.once('exit', () => children.delete(child));
  const url = await new Promise<string>((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error('the service did not start within 30 s')), 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (const line of buffer.split('\n').slice(0, -1)) {
        if (line.includes('"msg":"listening"')) {
          clearTimeout(timer);
          resolve((JSON.parse(line) as { url: string }).url);
        }
      }
      buffer = buffer.slice(buffer.lastIndexOf('\n') + 1);
    });
    child.once('exit', (code) => reject(new Error(`the service exited with ${code} before listening`)));
  });
  return {
    url,
    process: child,
    async stop(signal = 'SIGTERM') {
      stopping = true;
      child.kill(signal);
      await exited;
    },
  };
}

async function api(base: string, key: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

async function waitUntilSettled(
  deliveryIds: string[],
  timeoutMs: number,
): Promise<Map<string, { status: string; attempt_count: number; last_error: string | null }>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await sql<{ id: string; status: string; attempt_count: number; last_error: string | null }>(
      'select id, status, attempt_count, last_error from webhook_deliveries where id = any($1)',
      [deliveryIds],
    ).catch(() => []);
    const settled = rows.filter((r) => TERMINAL.includes(r.status));
    if (settled.length === deliveryIds.length || Date.now() > deadline) return new Map(rows.map((r) => [r.id, r]));
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Per-path behaviour: each endpoint gets its own path so its requests can be told apart. */
function scripted(plan: Record<string, (n: number) => ReceiverAction>) {
  const seen = new Map<string, number>();
  return (_index: number, req: { url?: string }): ReceiverAction => {
    const key = (req.url ?? '/').split('/')[1] ?? '';
    const n = seen.get(key) ?? 0;
    seen.set(key, n + 1);
    return plan[key]?.(n) ?? { status: 200 };
  };
}

function requestsByPath(receiver: HttpsReceiver): Map<string, number> {
  const by = new Map<string, number>();
  for (const r of receiver.requests) by.set(r.path, (by.get(r.path) ?? 0) + 1);
  return by;
}

async function createEndpointAndSend(base: string, key: string, url: string): Promise<{ endpointId: string; deliveryId: string }> {
  const created = await api(base, key, 'POST', '/api/v1/webhooks', { url });
  if (created.status !== 200) throw new Error(`create webhook: ${created.status} ${JSON.stringify(created.body)}`);
  const sent = await api(base, key, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`);
  if (sent.status !== 200) throw new Error(`test webhook: ${sent.status} ${JSON.stringify(sent.body)}`);
  return { endpointId: created.body.endpoint.id, deliveryId: sent.body.delivery.id };
}

/** A TCP server that answers a TLS handshake with plain text: every attempt fails at TLS. */
async function notTls(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

async function main(): Promise<void> {
  await sql(`drop database if exists ${DATABASE} with (force)`, [], ADMIN_URL);
  await sql(`create database ${DATABASE}`, [], ADMIN_URL);
  const orm = await openDatabase(DATABASE_URL, { pool: { min: 0, max: 2 } });
  await migrate(orm);
  const em = orm.em.fork();
  const tenant = async (plan: 'scale' | 'enterprise' = 'scale') => {
    const org = await createOrganization(em, { name: 'Faults', plan });
    const user = await createUser(em, { organizationId: org.id, email: `owner-${org.id}@example.com`, role: 'owner' });
    return { org, key: (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'faults', scopes: [...PERMISSIONS] })).key };
  };
  const tls = await makeTestTls();
  const env = {
    DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
    DELIVERY_EXTRA_CA_PEM: tls.caPem,
    DELIVERY_POLL_INTERVAL_MS: '50',
    DELIVERY_TEST_RETRY_INTERVAL_MS: '300',
    DELIVERY_ATTEMPT_TIMEOUT_MS: '1000',
  };

  console.log('1. receiver faults, each once, then 200');
  {
    const { key } = await tenant();
    const faults: Record<string, ReceiverAction> = {
      status500: { status: 500 },
      timeout: 'hang',
      reset: 'reset',
      drip: { drip: { bytes: 1000, intervalMs: 200 } },
      redirect: { status: 302, headers: { location: 'https://127.0.0.1:1/elsewhere' } },
    };
    const receiver = await startHttpsReceiver({
      tls,
      respond: scripted(Object.fromEntries(Object.entries(faults).map(([name, action]) => [name, (n: number) => (n === 0 ? action : { status: 200 })]))),
    });
    const broken = await notTls();
    const service = await startService(env);
    const sent = new Map<string, string>();
    for (const name of Object.keys(faults)) sent.set(name, (await createEndpointAndSend(service.url, key, `${receiver.url}/${name}`)).deliveryId);
    sent.set('tls', (await createEndpointAndSend(service.url, key, `${broken.url}/tls`)).deliveryId);
    counts.faultsInjected += sent.size;
    const settled = await waitUntilSettled([...sent.values()], 60_000);
    const seen = requestsByPath(receiver);
    for (const [name, id] of sent) {
      const row = settled.get(id);
      counts.deliveries++;
      if (name === 'tls') {
        check(row?.status === 'dead_lettered' && row.attempt_count === 8, `TLS failure on every attempt → dead-lettered after 8 (got ${row?.status}/${row?.attempt_count})`);
      } else {
        check(
          row?.status === 'delivered' && row.attempt_count === 2,
          `${name} once → delivered on attempt 2 (got ${row?.status}/${row?.attempt_count}${row?.last_error ? `, last error: ${row.last_error}` : ''})`,
        );
        check(seen.get(`/${name}`) === 2, `${name}: the receiver saw exactly 2 requests (got ${seen.get(`/${name}`)})`);
      }
      if (!row || !TERMINAL.includes(row.status)) counts.lost++;
    }
    await service.stop();
    await receiver.close();
    await broken.close();
  }

  console.log('2. SIGKILL in the middle of retries, then a restart');
  {
    const { key } = await tenant();
    const paths = Array.from({ length: 20 }, (_, i) => `k${i}`);
    const receiver = await startHttpsReceiver({
      tls,
      respond: scripted(Object.fromEntries(paths.map((p) => [p, (n: number) => (n < 3 ? { status: 500 } : { status: 200 })]))),
    });
    let service = await startService(env);
    const ids: string[] = [];
    for (const p of paths) ids.push((await createEndpointAndSend(service.url, key, `${receiver.url}/${p}`)).deliveryId);
    await new Promise((resolve) => setTimeout(resolve, 350));
    await service.stop('SIGKILL');
    counts.faultsInjected++;
    const mid = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status not in ('delivered')`, [ids]);
    console.log(`  killed with ${mid[0]?.n} of ${ids.length} deliveries unfinished`);
    service = await startService(env);
    const settled = await waitUntilSettled(ids, 90_000);
    const seen = requestsByPath(receiver);
    const attempts = await sql<{ delivery_id: string; n: number; distinct_n: number }>(
      'select delivery_id, count(*)::int as n, count(distinct attempt)::int as distinct_n from delivery_attempts where delivery_id = any($1) group by delivery_id',
      [ids],
    );
    for (const [i, id] of ids.entries()) {
      const row = settled.get(id);
      counts.deliveries++;
      if (!row || row.status !== 'delivered') counts.lost++;
      const received = seen.get(`/${paths[i]}`) ?? 0;
      if (row && received > row.attempt_count) counts.sentTwice++;
    }
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered after the restart');
    check(attempts.every((a) => a.n === a.distinct_n), 'no attempt number was recorded twice');
    check(
      ids.every((id, i) => (seen.get(`/${paths[i]}`) ?? 0) <= (settled.get(id)?.attempt_count ?? 0)),
      'no delivery reached the receiver more often than it has attempts (nothing sent twice for one attempt)',
    );
    await service.stop();
    await receiver.close();
  }

  console.log('3. PostgreSQL restarted under a running service');
  {
    const cluster = (() => {
      // Other suites sharing this PostgreSQL would see the restart too; CI runs this alone.
      if (process.argv.includes('--no-postgres-restart')) return null;
      try {
        const version = execFileSync('ls', ['/etc/postgresql']).toString().trim().split('\n').sort().at(-1);
        return version ? ['--skip-systemctl-redirect', version, 'main'] : null;
      } catch {
        return null;
      }
    })();
    if (!cluster) {
      console.log('  skipped: --no-postgres-restart, or no local PostgreSQL cluster this script can restart');
    } else {
      const { key } = await tenant();
      const paths = Array.from({ length: 20 }, (_, i) => `p${i}`);
      const receiver = await startHttpsReceiver({
        tls,
        // Four failures at 300 ms apart keep every delivery retrying while PostgreSQL restarts.
        respond: scripted(Object.fromEntries(paths.map((p) => [p, (n: number) => (n < 4 ? { status: 503 } : { status: 200 })]))),
      });
      const service = await startService(env);
      const ids: string[] = [];
      for (const p of paths) ids.push((await createEndpointAndSend(service.url, key, `${receiver.url}/${p}`)).deliveryId);
      const before = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status not in ('delivered', 'dead_lettered')`, [ids]);
      console.log(`  restarted with ${before[0]?.n} of ${ids.length} deliveries unfinished`);
      execFileSync('pg_ctlcluster', [...cluster, 'restart']);
      counts.faultsInjected++;
      const settled = await waitUntilSettled(ids, 120_000);
      for (const id of ids) {
        counts.deliveries++;
        if (!TERMINAL.includes(settled.get(id)?.status ?? '')) counts.lost++;
      }
      check(ids.every((id) => TERMINAL.includes(settled.get(id)?.status ?? '')), 'every delivery ended delivered or dead-lettered');
      const ready = await fetch(`${service.url}/readyz`);
      check(ready.status === 200, `the same service process is ready again (/readyz ${ready.status})`);
      const list = await api(service.url, key, 'GET', '/api/v1/webhooks');
      check(list.status === 200, `and answers the API (${list.status})`);
      await service.stop();
      await receiver.close();
    }
  }

  console.log('4. two instances, 1,000 concurrent test calls');
  {
    const { org, key } = await tenant();
    const receiver = await startHttpsReceiver({ tls });
    const [a, b] = await Promise.all([startService(env), startService(env)]);
    const created = await api(a!.url, key, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/two` });
    const endpointId = created.body.endpoint.id as string;
    const statuses = await Promise.all(
      Array.from({ length: 1000 }, (_, i) => api(i % 2 ? a!.url : b!.url, key, 'POST', `/api/v1/webhooks/${endpointId}/test`).then((r) => r.status)),
    );
    counts.faultsInjected++;
    const accepted = statuses.filter((s) => s === 200).length;
    const limited = statuses.filter((s) => s === 429).length;
    check(accepted === 300 && limited === 700, `exactly 300 accepted and 700 rate-limited (got ${accepted} and ${limited})`);
    const rows = await sql<{ id: string }>('select id from webhook_deliveries where endpoint_id = $1', [endpointId]);
    const settled = await waitUntilSettled(rows.map((r) => r.id), 120_000);
    const usage = await sql<{ deliveries: string }>('select deliveries from delivery_usage where organization_id = $1', [org.id]);
    check(Number(usage[0]?.deliveries) === 300, `the quota counted exactly 300 (got ${usage[0]?.deliveries})`);
    const events = receiver.requests.map((r) => (JSON.parse(r.rawBody) as { id: string }).id);
    check(events.length === 300 && new Set(events).size === 300, `the receiver got each of the 300 events exactly once (got ${events.length}, ${new Set(events).size} distinct)`);
    for (const row of rows) {
      counts.deliveries++;
      if (settled.get(row.id)?.status !== 'delivered') counts.lost++;
    }
    await Promise.all([a!.stop(), b!.stop()]);
    await receiver.close();
  }

  await orm.close();
  await sql(`drop database if exists ${DATABASE} with (force)`, [], ADMIN_URL);
  console.log(
    `\nfaults injected: ${counts.faultsInjected}, deliveries: ${counts.deliveries}, lost: ${counts.lost}, sent twice for one attempt: ${counts.sentTwice}`,
  );
  check(counts.lost === 0 && counts.sentTwice === 0, 'nothing lost, nothing sent twice');
  console.log(`${violations.length === 0 ? 'faults: all checks passed' : `faults: ${violations.length} check(s) failed`}`);
  if (violations.length > 0) console.error(`last lines the services printed:\n${serviceOutput.join('\n')}`);
  process.exit(violations.length === 0 ? 0 : 1);
}

main().catch(async (error: unknown) => {
  console.error(error, (error as { cause?: unknown }).cause ?? '');
  console.error(`last lines the services printed:\n${serviceOutput.join('\n')}`);
  await sql(`drop database if exists ${DATABASE} with (force)`, [], ADMIN_URL).catch(() => undefined);
  process.exit(2);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));
