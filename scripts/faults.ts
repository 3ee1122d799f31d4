/**
 * Fault injection: `npm run faults`. Runs the service as real child processes against a
 * PostgreSQL cluster of its own (initdb in a temporary directory, on a free port), so that
 * restarting that cluster touches nothing else, and injects what production will do to it.
 * First on the embedded engine:
 *   1. receiver faults: 500, timeout, connection reset, slow drip, redirect, TLS failure;
 *   2. the service killed with SIGKILL in the middle of retries, then restarted;
 *   3. PostgreSQL stopped while a receiver holds 16 requests for 3 s, and restarted with
 *      deliveries retrying;
 *   4. two service instances taking 1,000 concurrent test calls.
 * Then on Temporal: a development server of this run's own (a SQLite file in a temporary
 * directory, so a restart keeps its workflows), the API with TEMPORAL_ADDRESS and a task
 * queue of its own, and the delivery worker (`npm run worker`) as a process of its own:
 *   T1. the worker killed with SIGKILL while a receiver holds its attempts, then a new worker;
 *   T2. the Temporal server restarted with deliveries retrying;
 *   T3. PostgreSQL restarted with deliveries retrying;
 *   T4. the Temporal server down while the API takes test calls and publishes, then up: the
 *       pending sweep (shortened with DELIVERY_TEST_PENDING_SWEEP_MS) starts them.
 * Per event it checks what the README promises: arrivals at the receiver equal the attempts
 * recorded as sent, exactly one successful attempt per delivered event, and no arrival
 * without an accepted call; the totals are printed per engine. It stops every process it
 * started (services, workers, the Temporal server) and removes its cluster and Temporal
 * files, also when a check fails. Traffic stays on 127.0.0.1.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { OWNER_ROLE, SERVICE_ROLE, ensureServiceRoles, migrateAs, openDatabase, databaseAt } from '../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../src/auth';
import { INTERRUPTED_ATTEMPT } from '../src/delivery';
import { makeTestTls } from '../test/support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../test/support/https-receiver';
import { serviceNodeFlags } from './service-node-flags';
import { startTemporalDevServer, type DevServer } from './temporal-server';

const ROOT = path.resolve(__dirname, '..');
const TERMINAL = ['delivered', 'dead_lettered', 'failed'];

const violations: string[] = [];
const newCounts = () => ({ faultsInjected: 0, deliveries: 0, lost: 0, unexplainedArrivals: 0 });
const totals = { embedded: newCounts(), temporal: newCounts() };
/** The engine whose scenarios are running: their figures add up here. */
let counts = totals.embedded;

function check(ok: boolean, message: string): void {
  if (!ok) violations.push(message);
  console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${message}`);
}

/** A PostgreSQL cluster of this run's own: created, started, restarted and removed by it. */
class OwnCluster {
  private constructor(
    private readonly bin: string,
    private readonly dir: string,
    readonly port: number,
    private readonly asUser: string | null,
  ) {}

  static async create(): Promise<OwnCluster> {
    const versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(a) - Number(b));
    const version = versions.at(-1);
    if (!version) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
    const bin = `/usr/lib/postgresql/${version}/bin`;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'publishing-faults-pg-'));
    // PostgreSQL refuses to run as root: the cluster then belongs to the postgres user.
    const asUser = process.getuid?.() === 0 ? 'postgres' : null;
    if (asUser) {
      const { uid, gid } = statSync('/var/lib/postgresql');
      chownSync(dir, uid, gid);
    }
    const cluster = new OwnCluster(bin, dir, await freePort(), asUser);
    cluster.run('initdb', ['-D', `${dir}/data`, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    await cluster.start();
    return cluster;
  }

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async start(): Promise<void> {
    const options = `-p ${this.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${this.dir} -c fsync=off -c max_connections=200`;
    this.run('pg_ctl', ['-D', `${this.dir}/data`, '-o', options, '-l', `${this.dir}/server.log`, '-w', 'start']);
  }

  stop(): void {
    this.run('pg_ctl', ['-D', `${this.dir}/data`, '-m', 'fast', '-w', 'stop']);
  }

  destroy(): void {
    try {
      this.stop();
    } catch {
      // Already stopped.
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  private run(tool: string, args: string[]): void {
    const command = path.join(this.bin, tool);
    if (this.asUser) execFileSync('runuser', ['-u', this.asUser, '--', command, ...args], { stdio: 'pipe' });
    else execFileSync(command, args, { stdio: 'pipe' });
  }
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let cluster: OwnCluster | null = null;
/** The checks read as the superuser; the services connect as the service role. */
let databaseUrl = '';
let serviceUrls: Record<string, string> = {};

async function sql<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

interface Service {
  url: string;
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

/** Every service still running; each is its own process group, so nothing it spawned survives it. */
const children = new Set<ChildProcess>();
function killAll(): void {
  for (const child of children) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/**
 * Starts one of the service's entry points as its own process group and waits for the log
 * line saying it is ready; the API and the delivery worker start the same way, with the same
 * environment, as production runs them.
 */
async function startProcess(kind: 'service' | 'worker', entry: string, env: Record<string, string>, readyMessage: string): Promise<{ ready: Record<string, unknown>; stop(signal?: NodeJS.Signals): Promise<void> }> {
  // One process, not tsx's launcher and a child: a signal reaches the service itself.
  const child = spawn(process.execPath, ['--import', 'tsx', ...serviceNodeFlags(ROOT), entry], {
    cwd: ROOT,
    env: { ...process.env, NODE_ENV: 'test', LOG_LEVEL: 'info', ...serviceUrls, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(child);
  const name = `${kind} ${++servicesStarted} pid ${child.pid}`;
  keepOutput(name, child.stdout!);
  keepOutput(name, child.stderr!);
  let stopping = false;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    children.delete(child);
    if (!stopping) serviceOutput.push(`[${name}] exited unexpectedly (code ${code}, signal ${signal})`);
  });
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    let buffer = '';
    // A worker bundles the workflows at start: tens of seconds on a busy machine.
    const timer = setTimeout(() => reject(new Error(`the ${kind} did not start within 90 s`)), 90_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (const line of buffer.split('\n').slice(0, -1)) {
        if (line.includes(`"msg":"${readyMessage}"`)) {
          clearTimeout(timer);
          resolve(JSON.parse(line) as Record<string, unknown>);
        }
      }
      buffer = buffer.slice(buffer.lastIndexOf('\n') + 1);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the ${kind} exited with ${code} before it was ready`));
    });
  });
  return {
    ready,
    async stop(signal = 'SIGTERM') {
      stopping = true;
      try {
        process.kill(-child.pid!, signal);
      } catch {
        return;
      }
      await exited;
    },
  };
}

async function startService(env: Record<string, string>): Promise<Service> {
  const { ready, stop } = await startProcess('service', 'src/server/main.ts', { PORT: '0', ...env }, 'listening');
  return { url: ready.url as string, stop };
}

/** `npm run worker`: runs the delivery workflows and activities of the task queue in `env`. */
async function startWorker(env: Record<string, string>): Promise<Pick<Service, 'stop'>> {
  const { stop } = await startProcess('worker', 'src/delivery/worker-main.ts', { WORKER_METRICS_PORT: '0', ...env }, 'delivery worker running');
  return { stop };
}

async function api(base: string, key: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

interface SettledRow {
  id: string;
  event_id: string;
  /** The endpoint's URL: one event fans out to several endpoints, each on a path of its own. */
  url: string;
  status: string;
  attempt_count: number;
  last_error: string | null;
}

async function waitUntilSettled(deliveryIds: string[], timeoutMs: number): Promise<Map<string, SettledRow>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await sql<SettledRow>(
      `select d.id, d.event_id, e.url, d.status, d.attempt_count, d.last_error
         from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id where d.id = any($1)`,
      [deliveryIds],
    ).catch(() => []);
    const settled = rows.filter((r) => TERMINAL.includes(r.status));
    if (settled.length === deliveryIds.length || Date.now() > deadline) return new Map(rows.map((r) => [r.id, r]));
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * The README's promises, per delivery (an event at one endpoint): every arrival at the
 * receiver is an attempt recorded as sent (and the reverse, but for an attempt the service was
 * killed between recording it sent and writing it: `allowUnsentInterrupted`), a delivered
 * event has exactly one successful attempt, and nothing arrives that no accepted call recorded.
 */
async function checkPerEvent(
  label: string,
  receivers: HttpsReceiver[],
  rows: Map<string, SettledRow>,
  options: { allowUnsentInterrupted?: boolean } = {},
): Promise<void> {
  const ids = [...rows.keys()];
  const attempts = await sql<{ delivery_id: string; dispatched: number; succeeded: number; interrupted: number }>(
    `select delivery_id,
            count(*) filter (where dispatched_at is not null)::int as dispatched,
            count(*) filter (where response_status between 200 and 299)::int as succeeded,
            count(*) filter (where error = $2)::int as interrupted
       from delivery_attempts where delivery_id = any($1) group by delivery_id`,
    [ids, INTERRUPTED_ATTEMPT],
  );
  const byDelivery = new Map(attempts.map((a) => [a.delivery_id, a]));
  // An arrival belongs to the delivery of its event to the endpoint whose path it came on.
  const deliveryKey = (endpointPath: string, eventId: string) => `${endpointPath} ${eventId}`;
  const arrivals = new Map<string, number>();
  const successfulArrivals = new Map<string, number>();
  for (const receiver of receivers) {
    for (const request of receiver.requests) {
      const key = deliveryKey(request.path, (JSON.parse(request.rawBody) as { id: string }).id);
      arrivals.set(key, (arrivals.get(key) ?? 0) + 1);
      if (request.answered !== undefined && request.answered >= 200 && request.answered < 300) {
        successfulArrivals.set(key, (successfulArrivals.get(key) ?? 0) + 1);
      }
    }
  }
  const keyOf = (row: SettledRow) => deliveryKey(new URL(row.url).pathname, row.event_id);
  const known = new Set([...rows.values()].map(keyOf));
  const strangers = [...arrivals.keys()].filter((e) => !known.has(e));
  counts.unexplainedArrivals += strangers.length;
  check(strangers.length === 0, `${label}: no arrival without an accepted call (${strangers.length} unknown deliveries)`);

  const mismatched: string[] = [];
  const withinWindow: string[] = [];
  const notOneSuccess: string[] = [];
  for (const row of rows.values()) {
    const recorded = byDelivery.get(row.id) ?? { dispatched: 0, succeeded: 0, interrupted: 0 };
    const arrived = arrivals.get(keyOf(row)) ?? 0;
    if (arrived !== recorded.dispatched) {
      const killedBeforeWrite = options.allowUnsentInterrupted && arrived === recorded.dispatched - 1 && recorded.interrupted >= 1;
      (killedBeforeWrite ? withinWindow : mismatched).push(`${row.event_id}: ${arrived} arrived, ${recorded.dispatched} recorded sent`);
    }
    if (row.status === 'delivered' && recorded.succeeded !== 1) notOneSuccess.push(`${row.event_id}: ${recorded.succeeded} successful attempts`);
    if (row.status === 'delivered' && (successfulArrivals.get(keyOf(row)) ?? 0) > 1 + recorded.interrupted) {
      notOneSuccess.push(`${row.event_id}: answered 2xx ${successfulArrivals.get(keyOf(row))} times`);
    }
  }
  check(mismatched.length === 0, `${label}: per delivery, arrivals equal attempts recorded as sent${mismatched.length ? ` (${mismatched.slice(0, 5).join('; ')})` : ''}`);
  if (withinWindow.length > 0) console.log(`       ${withinWindow.length} event(s) killed between recording an attempt sent and writing it (README window): ${withinWindow.join('; ')}`);
  check(notOneSuccess.length === 0, `${label}: exactly one successful attempt per delivered event${notOneSuccess.length ? ` (${notOneSuccess.slice(0, 5).join('; ')})` : ''}`);
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

/** Each of `paths` answers `action` to its first `times` requests, then 200. */
function firstOnEachPath(paths: string[], times: number, action: ReceiverAction) {
  return scripted(Object.fromEntries(paths.map((p) => [p, (n: number) => (n < times ? action : { status: 200 })])));
}

/** One endpoint per path of the receiver, and a test call to each: the deliveries' ids. */
async function sendToEachPath(base: string, key: string, receiverUrl: string, paths: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const p of paths) ids.push((await createEndpointAndSend(base, key, `${receiverUrl}/${p}`)).deliveryId);
  return ids;
}

/** Adds the deliveries to the engine's figures: lost is one that never reached a final state. */
function tally(ids: string[], settled: Map<string, SettledRow>): void {
  for (const id of ids) {
    counts.deliveries++;
    if (!TERMINAL.includes(settled.get(id)?.status ?? '')) counts.lost++;
  }
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

/** An organization on the scale plan with an owner's key holding every scope. */
async function newTenant(): Promise<{ org: { id: string }; key: string }> {
  const orm = await openDatabase(databaseAt(databaseUrl), { pool: { min: 0, max: 2 } });
  try {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Faults', plan: 'scale' });
    const user = await createUser(em, { organizationId: org.id, email: `owner-${org.id}@example.com`, role: 'owner' });
    return { org, key: (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'faults', scopes: [...PERMISSIONS] })).key };
  } finally {
    await orm.close();
  }
}

async function main(): Promise<void> {
  cluster = await OwnCluster.create();
  console.log(`PostgreSQL cluster of this run on 127.0.0.1:${cluster.port}`);
  // As in production: migrations as the owner role, the service as the service role.
  const admin = new Client({ connectionString: cluster.adminUrl });
  await admin.connect();
  try {
    await ensureServiceRoles(admin, { login: true });
    await admin.query(`create database publishing_faults owner ${OWNER_ROLE}`);
  } finally {
    await admin.end();
  }
  const asRole = (role: string) => `postgres://${role}@127.0.0.1:${cluster!.port}/publishing_faults`;
  await migrateAs(databaseAt(asRole(OWNER_ROLE)));
  serviceUrls = { DATABASE_URL: asRole(SERVICE_ROLE), DATABASE_MIGRATION_URL: asRole(OWNER_ROLE) };
  databaseUrl = asRole('postgres');
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
    const { key } = await newTenant();
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
    tally([...sent.values()], settled);
    for (const [name, id] of sent) {
      const row = settled.get(id);
      if (name === 'tls') {
        check(row?.status === 'dead_lettered' && row.attempt_count === 8, `TLS failure on every attempt → dead-lettered after 8 (got ${row?.status}/${row?.attempt_count})`);
      } else {
        check(
          row?.status === 'delivered' && row.attempt_count === 2,
          `${name} once → delivered on attempt 2 (got ${row?.status}/${row?.attempt_count}${row?.last_error ? `, last error: ${row.last_error}` : ''})`,
        );
      }
    }
    await service.stop();
    await checkPerEvent('receiver faults', [receiver], new Map([...settled].filter(([id]) => id !== sent.get('tls'))));
    const tlsAttempts = await sql<{ n: number }>('select count(*)::int as n from delivery_attempts where delivery_id = $1 and dispatched_at is null', [sent.get('tls')]);
    check(tlsAttempts[0]?.n === 8, `TLS failures count as attempts that never reached the receiver (${tlsAttempts[0]?.n} of 8 unsent)`);
    await receiver.close();
    await broken.close();
  }

  console.log('2. SIGKILL in the middle of retries, then a restart');
  {
    const { key } = await newTenant();
    const paths = Array.from({ length: 20 }, (_, i) => `k${i}`);
    const receiver = await startHttpsReceiver({ tls, respond: firstOnEachPath(paths, 3, { status: 500 }) });
    let service = await startService(env);
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    // Kill once the retries are under way: some deliveries have failed attempts behind them.
    await receiver.waitForRequests(25, 30_000);
    await service.stop('SIGKILL');
    counts.faultsInjected++;
    const mid = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status <> 'delivered'`, [ids]);
    console.log(`  killed with ${mid[0]?.n} of ${ids.length} deliveries unfinished, ${receiver.requests.length} requests received`);
    service = await startService(env);
    const settled = await waitUntilSettled(ids, 90_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered after the restart');
    await service.stop();
    await checkPerEvent('SIGKILL', [receiver], settled, { allowUnsentInterrupted: true });
    await receiver.close();
  }

  console.log('3a. PostgreSQL stopped while a receiver holds 16 requests for 3 s');
  {
    const { key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 200, delayMs: 3_000 }) });
    const service = await startService({ ...env, DELIVERY_ATTEMPT_TIMEOUT_MS: '10000' });
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) ids.push((await createEndpointAndSend(service.url, key, `${receiver.url}/h${i}`)).deliveryId);
    await receiver.waitForRequests(16, 30_000);
    cluster.stop();
    counts.faultsInjected++;
    // The answers come while PostgreSQL is down: each outcome must be kept until it can be recorded.
    const answered = Date.now() + 30_000;
    while (receiver.requests.some((r) => r.answered === undefined) && Date.now() < answered) await new Promise((r) => setTimeout(r, 100));
    check(receiver.requests.every((r) => r.answered === 200), 'the receiver answered all 16 while PostgreSQL was down');
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await cluster.start();
    const settled = await waitUntilSettled(ids, 60_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered' && settled.get(id)?.attempt_count === 1), 'every delivery ended delivered on attempt 1');
    check(receiver.requests.length === 16, `each event arrived exactly once (${receiver.requests.length} requests for 16 events)`);
    await checkPerEvent('PostgreSQL stopped mid-request', [receiver], settled);
    const ready = await fetch(`${service.url}/readyz`);
    check(ready.status === 200, `the same service process is ready again (/readyz ${ready.status})`);
    await service.stop();
    await receiver.close();
  }

  console.log('3b. PostgreSQL restarted with 20 deliveries retrying');
  {
    const { key } = await newTenant();
    const paths = Array.from({ length: 20 }, (_, i) => `p${i}`);
    const receiver = await startHttpsReceiver({
      tls,
      // Four failures 300 ms apart keep every delivery retrying while PostgreSQL restarts.
      respond: firstOnEachPath(paths, 4, { status: 503 }),
    });
    const service = await startService(env);
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    cluster.stop();
    await cluster.start();
    counts.faultsInjected++;
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered');
    await checkPerEvent('PostgreSQL restarted while retrying', [receiver], settled);
    const list = await api(service.url, key, 'GET', '/api/v1/webhooks');
    check(list.status === 200, `the same service process answers the API (${list.status})`);
    await service.stop();
    await receiver.close();
  }

  console.log('4. two instances, 1,000 concurrent test calls');
  {
    const { org, key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls });
    // A loaded machine may take longer than 1 s per attempt; a timed-out attempt that arrived is still counted right.
    const loaded = { ...env, DELIVERY_ATTEMPT_TIMEOUT_MS: '10000' };
    const [a, b] = await Promise.all([startService(loaded), startService(loaded)]);
    const created = await api(a!.url, key, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/two` });
    const endpointId = created.body.endpoint.id as string;
    const answers = await Promise.all(
      Array.from({ length: 1000 }, (_, i) => api(i % 2 ? a!.url : b!.url, key, 'POST', `/api/v1/webhooks/${endpointId}/test`)),
    );
    counts.faultsInjected++;
    const accepted = answers.filter((r) => r.status === 200);
    const limited = answers.filter((r) => r.status === 429).length;
    const others = answers.filter((r) => r.status !== 200 && r.status !== 429).map((r) => `${r.status} ${r.body?.code ?? ''}`.trim());
    check(
      accepted.length === 300 && limited === 700,
      `exactly 300 accepted and 700 rate-limited (got ${accepted.length} and ${limited}${others.length ? `; other answers: ${[...new Set(others)].map((o) => `${others.filter((x) => x === o).length}× ${o}`).join(', ')}` : ''})`,
    );
    const rows = await sql<{ id: string }>('select id from webhook_deliveries where endpoint_id = $1', [endpointId]);
    check(rows.length === accepted.length, `one delivery recorded per accepted call (${rows.length})`);
    const acceptedIds = new Set(accepted.map((r) => r.body.delivery.id as string));
    check(rows.every((r) => acceptedIds.has(r.id)), 'every recorded delivery is one an accepted call returned');
    const settled = await waitUntilSettled(rows.map((r) => r.id), 120_000);
    const usage = await sql<{ deliveries: string }>('select deliveries from delivery_usage where organization_id = $1', [org.id]);
    check(Number(usage[0]?.deliveries) === 300, `the quota counted exactly 300 (got ${usage[0]?.deliveries})`);
    tally(rows.map((r) => r.id), settled);
    check([...settled.values()].every((r) => r.status === 'delivered'), 'every accepted event was delivered');
    await Promise.all([a!.stop(), b!.stop()]);
    await checkPerEvent('two instances', [receiver], settled);
    await receiver.close();
  }

  counts = totals.temporal;
  await temporalScenarios(env, tls);

  console.log('');
  for (const [engine, total] of Object.entries(totals)) {
    console.log(
      `${engine}: faults injected: ${total.faultsInjected}, deliveries: ${total.deliveries}, lost: ${total.lost}, arrivals without an accepted call: ${total.unexplainedArrivals}`,
    );
  }
  check(
    Object.values(totals).every((total) => total.lost === 0 && total.unexplainedArrivals === 0),
    'on both engines, nothing lost, nothing sent that was not asked for',
  );
}

let temporalServer: DevServer | null = null;
let temporalDir: string | null = null;

/** Stops the Temporal server and starts it again on the same port and SQLite file: its workflows survive. */
async function restartTemporal(): Promise<void> {
  const { options } = temporalServer!;
  await temporalServer!.stop();
  temporalServer = null;
  temporalServer = await startTemporalDevServer(options);
}

/** The internal credential the Temporal part publishes events with. */
const PUBLISHER_TOKEN = 'faults-publisher-token-0123456789abcdef';

/** EventService/PublishEvent over Connect's JSON protocol, as an internal service calls it. */
async function publish(base: string, organizationId: string, eventId: string): Promise<{ status: number; deliveryIds: string[] }> {
  const res = await fetch(`${base}/publishing.internal.v1.EventService/PublishEvent`, {
    method: 'POST',
    headers: { authorization: `Bearer ${PUBLISHER_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ organizationId, eventId, eventType: 'post.held', payload: { postId: eventId } }),
  });
  const body = (await res.json().catch(() => null)) as { event?: { deliveries?: { deliveryId: string }[] } } | null;
  return { status: res.status, deliveryIds: (body?.event?.deliveries ?? []).map((d) => d.deliveryId) };
}

/**
 * The same promises with each delivery a `deliverWebhook` workflow: the API started with
 * TEMPORAL_ADDRESS and the delivery worker as processes of their own, against a Temporal
 * development server this run starts on a SQLite file, so a restart keeps its workflows.
 */
async function temporalScenarios(embeddedEnv: Record<string, string>, tls: Awaited<ReturnType<typeof makeTestTls>>): Promise<void> {
  temporalDir = mkdtempSync(path.join(os.tmpdir(), 'publishing-faults-temporal-'));
  temporalServer = await startTemporalDevServer({
    dbFile: path.join(temporalDir, 'temporal.sqlite'),
    uiPort: false,
    logFile: path.join(temporalDir, 'temporal.log'),
  });
  console.log(`Temporal development server of this run on ${temporalServer.address}`);
  const env = {
    ...embeddedEnv,
    TEMPORAL_ADDRESS: temporalServer.address,
    TEMPORAL_SEARCH_ATTRIBUTES: 'true',
    TEMPORAL_TASK_QUEUE: `faults-${process.pid}`,
    // Attempts a receiver holds for 3 s must not time out.
    DELIVERY_ATTEMPT_TIMEOUT_MS: '10000',
    DELIVERY_TEST_PENDING_SWEEP_MS: '1000',
    INTERNAL_SERVICE_TOKENS: `faults:${PUBLISHER_TOKEN}`,
  };
  const service = await startService(env);
  let worker = await startWorker(env);

  console.log('T1. the worker killed with SIGKILL while a receiver holds 10 attempts for 3 s, then a new worker');
  {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `w${i}`);
    const receiver = await startHttpsReceiver({ tls, respond: firstOnEachPath(paths, 1, { status: 200, delayMs: 3_000 }) });
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    await receiver.waitForRequests(paths.length, 30_000);
    await worker.stop('SIGKILL');
    counts.faultsInjected++;
    const inFlight = receiver.requests.filter((r) => r.answered === undefined).length;
    const started = Date.now();
    worker = await startWorker(env);
    // Temporal retries an attempt whose worker died once its heartbeat timeout (15 s) passes.
    const settled = await waitUntilSettled(ids, 120_000);
    console.log(`  killed with ${inFlight} attempts unanswered at the receiver; all settled ${Math.round((Date.now() - started) / 1000)} s later`);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered after a new worker took over');
    await checkPerEvent('worker SIGKILL', [receiver], settled, { allowUnsentInterrupted: true });
    await receiver.close();
  }

  console.log('T2. the Temporal server restarted with 10 deliveries retrying');
  {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `r${i}`);
    const receiver = await startHttpsReceiver({ tls, respond: firstOnEachPath(paths, 3, { status: 503 }) });
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    await receiver.waitForRequests(15, 30_000);
    await restartTemporal();
    counts.faultsInjected++;
    const mid = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status <> 'delivered'`, [ids]);
    console.log(`  restarted with ${mid[0]?.n} of ${ids.length} deliveries unfinished, ${receiver.requests.length} requests received`);
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(
      ids.every((id) => settled.get(id)?.status === 'delivered' && settled.get(id)?.attempt_count === 4),
      'every delivery ended delivered on attempt 4, as scheduled before the restart',
    );
    await checkPerEvent('Temporal restarted while retrying', [receiver], settled);
    await receiver.close();
  }

  console.log('T3. PostgreSQL restarted with 10 deliveries retrying on Temporal');
  {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `q${i}`);
    const receiver = await startHttpsReceiver({ tls, respond: firstOnEachPath(paths, 4, { status: 503 }) });
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    await receiver.waitForRequests(10, 30_000);
    cluster!.stop();
    await cluster!.start();
    counts.faultsInjected++;
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered');
    await checkPerEvent('PostgreSQL restarted under Temporal', [receiver], settled);
    await receiver.close();
  }

  console.log('T4. Temporal down while the API takes 5 test calls and 2 publishes to 3 endpoints, then up again');
  {
    const { org, key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls });
    const endpointIds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const created = await api(service.url, key, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/d${i}`, eventNames: ['post.held'] });
      if (created.status !== 200) throw new Error(`create webhook: ${created.status} ${JSON.stringify(created.body)}`);
      endpointIds.push(created.body.endpoint.id as string);
    }
    await temporalServer.stop();
    counts.faultsInjected++;
    const tests = await Promise.all(Array.from({ length: 5 }, (_, i) => api(service.url, key, 'POST', `/api/v1/webhooks/${endpointIds[i % 3]}/test`)));
    const published = await Promise.all(['down-1', 'down-2'].map((eventId) => publish(service.url, org.id, `${eventId}-${org.id}`)));
    check(
      tests.every((r) => r.status === 200) && published.every((r) => r.status === 200 && r.deliveryIds.length === 3),
      `every call accepted while Temporal was down (test calls ${tests.map((r) => r.status).join(' ')}, publishes ${published.map((r) => `${r.status}/${r.deliveryIds.length}`).join(' ')})`,
    );
    const ids = [...tests.map((r) => r.body?.delivery?.id as string), ...published.flatMap((r) => r.deliveryIds)].filter(Boolean);
    const pending = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status = 'pending'`, [ids]);
    check(pending[0]?.n === 11, `all 11 deliveries recorded as pending while Temporal was down (${pending[0]?.n})`);
    check(receiver.requests.length === 0, `nothing sent while Temporal was down (${receiver.requests.length} requests)`);
    temporalServer = await startTemporalDevServer(temporalServer.options);
    const started = Date.now();
    const settled = await waitUntilSettled(ids, 120_000);
    console.log(`  Temporal up again: all settled ${Math.round((Date.now() - started) / 1000)} s later`);
    tally(ids, settled);
    check(ids.length === 11 && ids.every((id) => settled.get(id)?.status === 'delivered'), 'the pending sweep started every one, and every one ended delivered');
    await checkPerEvent('Temporal down while accepting calls', [receiver], settled);
    await receiver.close();
  }

  // The worker first, so no attempt starts against an API or server that is going away.
  await worker.stop();
  await service.stop();
  await temporalServer.stop();
  temporalServer = null;
}

async function cleanUp(): Promise<void> {
  killAll();
  await temporalServer?.kill();
  temporalServer = null;
  if (temporalDir) rmSync(temporalDir, { recursive: true, force: true });
  temporalDir = null;
  cluster?.destroy();
  cluster = null;
}

main()
  .catch((error: unknown) => {
    console.error(error, (error as { cause?: unknown }).cause ?? '');
    violations.push(`the run stopped: ${String(error)}`);
  })
  .finally(async () => {
    await cleanUp();
    console.log(`${violations.length === 0 ? 'faults: all checks passed' : `faults: ${violations.length} check(s) failed`}`);
    if (violations.length > 0) console.error(`last lines the services printed:\n${serviceOutput.join('\n')}`);
    process.exitCode = violations.length === 0 ? 0 : 1;
  });
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}
process.on('exit', killAll);
