import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import tls from 'node:tls';
import { Connection } from '@temporalio/client';
import { Client as PgClient } from 'pg';
import { OwnCluster } from '../../scripts/faults/cluster';
import { startTemporalProductionServer, type ProductionServer } from '../../scripts/temporal-production';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import { OWNER_ROLE, SERVICE_ROLE, databaseAt, ensureServiceRoles, migrateAs, openDatabase } from '../../src/db';
import { INTERRUPTED_ATTEMPT } from '../../src/delivery';
import { MAX_ATTEMPTS } from '../../workflows/policy';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { processTreeCpuSeconds, startServiceProcess, stopServiceProcesses, type ServiceProcess } from '../support/service-process';
import { productionWorkflowBundlePath } from '../support/temporal';
import { makeTestTls } from '../support/tls';

/**
 * The production topology, as a platform team runs it: Temporal's own server on PostgreSQL
 * with its frontend behind mutual TLS (scripts/temporal-production.ts), two API instances and
 * two delivery workers as processes of their own connecting with client certificates, and one
 * PostgreSQL cluster holding Temporal's persistence and ours. The cluster is this suite's own
 * (the fault run's `OwnCluster`, scripts/faults/cluster.ts), so it can be restarted without touching anything else.
 *
 * For every delivery: none lost (each ends delivered or dead-lettered), arrivals at the
 * receiver equal the attempts recorded as sent, and a delivered event has exactly one
 * successful attempt. The retry interval is shortened (DELIVERY_TEST_RETRY_INTERVAL_MS); the
 * contract's 30 s x 8 is held by test/delivery/contract-timing.temporal.test.ts.
 */
const PUBLISHER_TOKEN = 'topology-publisher-token-0123456789abcdef';
const RETRY_INTERVAL_MS = 1_000;
const TERMINAL = ['delivered', 'dead_lettered', 'failed'];

let cluster: OwnCluster | null = null;
/** A database of the suite's cluster, as `role`. */
const urlOf = (database: string, role = 'postgres') => `postgres://${role}@127.0.0.1:${cluster!.port}/${database}`;
let temporal: ProductionServer | null = null;
let receiver: HttpsReceiver | null = null;
let databaseUrl = '';
let env: Record<string, string> = {};
const apis: ServiceProcess[] = [];
const workers: ServiceProcess[] = [];
/** What each path of the receiver answers to its n-th request (default 200). */
const plans = new Map<string, (n: number) => ReceiverAction>();
/** CPU seconds of the processes that were stopped before the end (a killed worker, the server before its restart), by role. */
const cpuOfStopped = { temporal: 0, workers: 0 };
const seenPerPath = new Map<string, number>();

async function sql<T>(text: string, params: unknown[] = []): Promise<T[]> {
  const client = new PgClient({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/**
 * CPU seconds of this process's children that have ended and been waited for (the service's
 * processes and Temporal's server, under its watchdog shell), from /proc: 100 ticks a second.
 */
function endedChildrenCpuSeconds(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100;
}
const suiteStarted = { at: Date.now(), childrenCpu: endedChildrenCpuSeconds(), ownCpu: process.cpuUsage() };

beforeAll(async () => {
  const started = Date.now();
  cluster = await OwnCluster.create();
  const admin = new PgClient({ connectionString: cluster.adminUrl });
  await admin.connect();
  try {
    await ensureServiceRoles(admin, { login: true });
    await admin.query(`create database publishing owner ${OWNER_ROLE}`);
  } finally {
    await admin.end();
  }
  const [receiverTls] = await Promise.all([makeTestTls(), migrateAs(databaseAt(urlOf('publishing', OWNER_ROLE)))]);
  databaseUrl = urlOf('publishing');
  temporal = await startTemporalProductionServer({ postgres: { host: '127.0.0.1', port: cluster.port, user: 'postgres' }, clients: ['worker'] });
  receiver = await startHttpsReceiver({
    tls: receiverTls,
    respond: (_index, req) => {
      const key = (req.url ?? '/').split('/')[1] ?? '';
      const n = seenPerPath.get(key) ?? 0;
      seenPerPath.set(key, n + 1);
      return plans.get(key.replace(/\d+$/, ''))?.(n) ?? { status: 200 };
    },
  });
  env = {
    DATABASE_URL: urlOf('publishing', SERVICE_ROLE),
    DATABASE_MIGRATION_URL: urlOf('publishing', OWNER_ROLE),
    DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
    DELIVERY_EXTRA_CA_PEM: receiverTls.caPem,
    DELIVERY_TEST_RETRY_INTERVAL_MS: String(RETRY_INTERVAL_MS),
    // The longest test period: a pass starts again (idempotently) every row still pending, and a fan-out's rows wait their turn for a while.
    DELIVERY_TEST_PENDING_SWEEP_MS: '5000',
    DELIVERY_ATTEMPT_TIMEOUT_MS: '10000',
    INTERNAL_SERVICE_TOKENS: `topology:${PUBLISHER_TOKEN}`,
    TEMPORAL_TASK_QUEUE: 'deliveries',
    // The production bundle global setup built: a worker that bundles at start spends seconds of CPU on it.
    WORKER_WORKFLOW_BUNDLE: productionWorkflowBundlePath(),
    TEMPORAL_SEARCH_ATTRIBUTES: 'true',
  };
  const processes = await Promise.all([
    startServiceProcess('api', { ...env, ...temporal.serviceEnv('service') }),
    startServiceProcess('api', { ...env, ...temporal.serviceEnv('service') }),
    startServiceProcess('worker', { ...env, ...temporal.serviceEnv('worker') }),
    startServiceProcess('worker', { ...env, ...temporal.serviceEnv('worker') }),
  ]);
  apis.push(...processes.slice(0, 2));
  workers.push(...processes.slice(2));
  process.stderr.write(`temporal-production: topology up in ${Math.round((Date.now() - started) / 1000)} s\n`);
}, 240_000);

afterAll(async () => {
  const cpu = (processes: ServiceProcess[]) => processes.reduce((sum, p) => sum + processTreeCpuSeconds(p.pid), 0);
  const split = temporal
    ? `the Temporal server ${Math.round(cpuOfStopped.temporal + processTreeCpuSeconds(temporal.pid() ?? 0))} s, the two APIs ${Math.round(cpu(apis))} s, the three workers ${Math.round(cpuOfStopped.workers + cpu(workers))} s`
    : '';
  await stopServiceProcesses();
  await receiver?.close();
  await temporal?.destroy();
  cluster?.destroy();
  const own = process.cpuUsage(suiteStarted.ownCpu);
  process.stderr.write(
    `temporal-production: ${Math.round((Date.now() - suiteStarted.at) / 1000)} s; CPU ${Math.round(endedChildrenCpuSeconds() - suiteStarted.childrenCpu)} s in the API, worker and Temporal server processes, ` +
      `${Math.round((own.user + own.system) / 1e6)} s in the test's (receiver, checks); PostgreSQL's not counted. Of it: ${split}\n`,
  );
}, 60_000);

async function api(base: string, key: string, method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

async function newTenant(): Promise<{ organizationId: string; key: string }> {
  const orm = await openDatabase(databaseAt(databaseUrl), { pool: { min: 0, max: 2 } });
  try {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Topology', plan: 'scale' });
    const user = await createUser(em, { organizationId: org.id, email: `owner-${org.id}@example.com`, role: 'owner' });
    return { organizationId: org.id, key: (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'topology', scopes: [...PERMISSIONS] })).key };
  } finally {
    await orm.close();
  }
}

/** Endpoints at `${receiver}/${prefix}${i}`, created through both API instances in turn. */
async function createEndpoints(key: string, prefix: string, count: number, eventNames?: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 16) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(16, count - i) }, async (_, j) => {
        const created = await api(apis[(i + j) % 2]!.url!, key, 'POST', '/api/v1/webhooks', { url: `${receiver!.url}/${prefix}${i + j}`, ...(eventNames && { eventNames }) });
        if (created.status !== 200) throw new Error(`create webhook: ${created.status} ${JSON.stringify(created.body)}`);
        return created.body.endpoint.id as string;
      }),
    );
    ids.push(...batch);
  }
  return ids;
}

/** A test call to each endpoint, alternating between the two API instances: the deliveries' ids. */
async function testEach(key: string, endpointIds: string[]): Promise<string[]> {
  return Promise.all(
    endpointIds.map(async (id, i) => {
      const sent = await api(apis[i % 2]!.url!, key, 'POST', `/api/v1/webhooks/${id}/test`);
      if (sent.status !== 200) throw new Error(`test webhook: ${sent.status} ${JSON.stringify(sent.body)}`);
      return sent.body.delivery.id as string;
    }),
  );
}

interface Settled {
  id: string;
  event_id: string;
  url: string;
  status: string;
  attempt_count: number;
}

async function untilSettled(ids: string[], timeoutMs: number): Promise<Map<string, Settled>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await sql<Settled>(
      `select d.id, d.event_id, e.url, d.status, d.attempt_count from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id where d.id = any($1)`,
      [ids],
    ).catch(() => []);
    if (rows.filter((r) => TERMINAL.includes(r.status)).length === ids.length || Date.now() > deadline) return new Map(rows.map((r) => [r.id, r]));
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * The promises per delivery, as a list of what broke them (empty when all hold): none lost,
 * arrivals = attempts recorded as sent (but for an attempt whose worker was killed between
 * recording it sent and writing it, with `allowInterrupted`), one success per delivered event.
 */
async function brokenPromises(ids: string[], settled: Map<string, Settled>, options: { allowInterrupted?: boolean } = {}): Promise<string[]> {
  const attempts = await sql<{ delivery_id: string; sent: number; succeeded: number; interrupted: number }>(
    `select delivery_id,
            count(*) filter (where dispatched_at is not null)::int as sent,
            count(*) filter (where response_status between 200 and 299)::int as succeeded,
            count(*) filter (where error = $2)::int as interrupted
       from delivery_attempts where delivery_id = any($1) group by delivery_id`,
    [ids, INTERRUPTED_ATTEMPT],
  );
  const byDelivery = new Map(attempts.map((a) => [a.delivery_id, a]));
  const arrivals = new Map<string, { all: number; succeeded: number }>();
  for (const request of receiver!.requests) {
    const key = `${request.path} ${(JSON.parse(request.rawBody) as { id: string }).id}`;
    const seen = arrivals.get(key) ?? { all: 0, succeeded: 0 };
    seen.all++;
    if (request.answered !== undefined && request.answered >= 200 && request.answered < 300) seen.succeeded++;
    arrivals.set(key, seen);
  }
  const broken: string[] = [];
  for (const id of ids) {
    const row = settled.get(id);
    if (!row || !TERMINAL.includes(row.status)) {
      broken.push(`${id}: lost (${row?.status ?? 'no row'})`);
      continue;
    }
    const recorded = byDelivery.get(id) ?? { sent: 0, succeeded: 0, interrupted: 0 };
    const arrived = arrivals.get(`${new URL(row.url).pathname} ${row.event_id}`) ?? { all: 0, succeeded: 0 };
    const killedBeforeWrite = options.allowInterrupted && arrived.all === recorded.sent - 1 && recorded.interrupted >= 1;
    if (arrived.all !== recorded.sent && !killedBeforeWrite) broken.push(`${id}: ${arrived.all} arrived, ${recorded.sent} recorded as sent`);
    if (row.status === 'delivered' && recorded.succeeded !== 1) broken.push(`${id}: ${recorded.succeeded} successful attempts recorded`);
    if (row.status === 'delivered' && arrived.succeeded > 1 + recorded.interrupted) broken.push(`${id}: answered 2xx ${arrived.succeeded} times`);
  }
  return broken;
}

it('refuses a client without a certificate the run\'s CA signed, and serves one with it', async () => {
  const withCert = await Connection.connect(temporal!.connectionOptions('service'));
  try {
    expect((await withCert.workflowService.describeNamespace({ namespace: temporal!.namespace })).namespaceInfo?.name).toBe(temporal!.namespace);
  } finally {
    await withCert.close();
  }
  // The TLS handshake itself: the server ends it with the "certificate required" alert.
  const [host, port] = temporal!.address.split(':');
  let socket: tls.TLSSocket | undefined;
  const refusal = await new Promise<string>((resolve) => {
    socket = tls.connect({ host, port: Number(port), ca: temporal!.tls.caPem, servername: 'localhost', ALPNProtocols: ['h2'] }, () => socket!.write('PRI * HTTP/2.0\r\n\r\n'));
    socket.once('error', (error) => resolve(String(error)));
    socket.once('close', () => resolve('closed without an error'));
  }).finally(() => socket?.destroy());
  expect(refusal).toMatch(/certificate required/i);
  // And the SDK's client, given the CA but no certificate of its own, never gets an answer.
  const { tls: serverTls } = temporal!.connectionOptions('service');
  await expect(
    Connection.connect({ address: temporal!.address, tls: { serverRootCACertificate: serverTls!.serverRootCACertificate, serverNameOverride: 'localhost' }, connectTimeout: 2_000 }).then(async (connection) => {
      try {
        await connection.workflowService.describeNamespace({ namespace: temporal!.namespace });
      } finally {
        await connection.close();
      }
    }),
  ).rejects.toThrow();
});

it('delivers a 1,000-endpoint fan-out once to each endpoint, and dead-letters an endpoint that always fails after 8 attempts', async () => {
  const { organizationId, key } = await newTenant();
  plans.set('dead', () => ({ status: 500 }));
  const endpointIds = [...(await createEndpoints(key, 'fan', 1000, ['post.held'])), ...(await createEndpoints(key, 'dead', 1, ['post.held']))];
  const started = Date.now();
  const eventId = `fan-${randomUUID()}`;
  const res = await fetch(`${apis[0]!.url}/publishing.internal.v1.EventService/PublishEvent`, {
    method: 'POST',
    headers: { authorization: `Bearer ${PUBLISHER_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ organizationId, eventId, eventType: 'post.held', payload: { postId: eventId } }),
  });
  expect(res.status).toBe(200);
  const ids = ((await res.json()) as { event: { deliveries: { deliveryId: string }[] } }).event.deliveries.map((d) => d.deliveryId);
  expect(ids).toHaveLength(endpointIds.length);
  const settled = await untilSettled(ids, 450_000);
  process.stderr.write(`temporal-production: 1,001 deliveries settled ${Math.round((Date.now() - started) / 1000)} s after the publish\n`);
  expect(await brokenPromises(ids, settled)).toEqual([]);
  const byStatus = new Map<string, number>();
  for (const row of settled.values()) byStatus.set(`${row.status}/${row.url.includes('/dead') ? 'dead' : 'fan'}`, (byStatus.get(`${row.status}/${row.url.includes('/dead') ? 'dead' : 'fan'}`) ?? 0) + 1);
  expect(Object.fromEntries(byStatus)).toEqual({ 'delivered/fan': 1000, 'dead_lettered/dead': 1 });
  const dead = [...settled.values()].find((row) => row.url.includes('/dead'))!;
  expect(dead.attempt_count).toBe(MAX_ATTEMPTS);
  expect(receiver!.requests.filter((r) => r.path === '/dead0')).toHaveLength(MAX_ATTEMPTS);
  const [letter] = await sql<{ n: number }>('select count(*)::int as n from dead_letters where delivery_id = $1', [dead.id]);
  expect(letter!.n).toBe(1);
}, 540_000);

it('finishes every delivery when a worker is SIGKILLed with attempts in flight', async () => {
  const { key } = await newTenant();
  plans.set('held', (n) => (n === 0 ? { status: 200, delayMs: 3_000 } : { status: 200 }));
  const ids = await testEach(key, await createEndpoints(key, 'held', 10));
  const arrivals = () => receiver!.requests.filter((r) => r.path.startsWith('/held'));
  for (const deadline = Date.now() + 30_000; arrivals().length < 10 && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(arrivals()).toHaveLength(10);
  // Temporal says which worker runs each attempt (its identity is `pid@host`): the one running most is killed.
  const running = await attemptsByWorker(ids);
  const killed = workers.reduce((most, worker) => ((running.get(worker.pid)?.length ?? 0) > (running.get(most.pid)?.length ?? 0) ? worker : most));
  const cut = running.get(killed.pid) ?? [];
  expect(cut.length).toBeGreaterThan(0);
  workers.splice(workers.indexOf(killed), 1);
  cpuOfStopped.workers += processTreeCpuSeconds(killed.pid);
  await killed.stop('SIGKILL');
  // A new worker takes the killed one's place while Temporal waits out the heartbeat timeout.
  const replacement = startServiceProcess('worker', { ...env, ...temporal!.serviceEnv('worker') });
  const settled = await untilSettled(ids, 90_000);
  workers.push(await replacement);
  expect([...settled.values()].map((row) => row.status)).toEqual(ids.map(() => 'delivered'));
  expect(await brokenPromises(ids, settled, { allowInterrupted: true })).toEqual([]);
  // Exactly the attempts the kill cut were sent again; the others arrived once.
  const resent = [...settled.values()].filter((row) => arrivals().filter((r) => r.path === new URL(row.url).pathname).length > 1).map((row) => row.id);
  expect(resent.sort()).toEqual(cut.sort());
}, 150_000);

/** The deliveries whose attempt is running now, by the pid of the worker running it (from each workflow's pending activity). */
async function attemptsByWorker(ids: string[]): Promise<Map<number, string[]>> {
  const rows = await sql<{ id: string; workflow_id: string }>('select id, workflow_id from webhook_deliveries where id = any($1)', [ids]);
  const connection = await Connection.connect(temporal!.connectionOptions('service'));
  const byWorker = new Map<number, string[]>();
  try {
    for (const row of rows) {
      const described = await connection.workflowService.describeWorkflowExecution({ namespace: temporal!.namespace, execution: { workflowId: row.workflow_id } });
      for (const activity of described.pendingActivities ?? []) {
        const pid = Number((activity.lastWorkerIdentity ?? '').split('@')[0]);
        byWorker.set(pid, [...(byWorker.get(pid) ?? []), row.id]);
      }
    }
  } finally {
    await connection.close();
  }
  return byWorker;
}

it('finishes every delivery on schedule when the Temporal server restarts in the middle of retries', async () => {
  const { key } = await newTenant();
  plans.set('retry', (n) => (n < 3 ? { status: 503 } : { status: 200 }));
  const ids = await testEach(key, await createEndpoints(key, 'retry', 10));
  const arrived = () => receiver!.requests.filter((r) => r.path.startsWith('/retry')).length;
  for (const deadline = Date.now() + 30_000; arrived() < 15 && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(arrived()).toBeGreaterThanOrEqual(15);
  cpuOfStopped.temporal += processTreeCpuSeconds(temporal!.pid() ?? 0);
  await temporal!.stop();
  await temporal!.start();
  const settled = await untilSettled(ids, 90_000);
  expect([...settled.values()].map((row) => `${row.status}/${row.attempt_count}`)).toEqual(ids.map(() => 'delivered/4'));
  expect(await brokenPromises(ids, settled)).toEqual([]);
}, 150_000);

it('finishes every delivery when PostgreSQL, Temporal\'s and ours, restarts with deliveries in flight', async () => {
  const { key } = await newTenant();
  plans.set('pg', (n) => (n === 0 ? { status: 503, delayMs: 1_500 } : n === 1 ? { status: 200, delayMs: 1_500 } : { status: 200 }));
  const ids = await testEach(key, await createEndpoints(key, 'pg', 10));
  const arrived = () => receiver!.requests.filter((r) => r.path.startsWith('/pg')).length;
  for (const deadline = Date.now() + 30_000; arrived() < 10 && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(arrived()).toBe(10);
  cluster!.stop();
  await cluster!.start();
  const settled = await untilSettled(ids, 120_000);
  expect([...settled.values()].map((row) => row.status)).toEqual(ids.map(() => 'delivered'));
  expect(await brokenPromises(ids, settled)).toEqual([]);
  const list = await api(apis[1]!.url!, key, 'GET', '/api/v1/webhooks');
  expect(list.status).toBe(200);
}, 180_000);
