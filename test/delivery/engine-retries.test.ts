import { startTestApp, TEST_ENV, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/config/logger';
import { openDatabase, databaseAt } from '../../src/db';
import { start, type App } from '../../src/server';
import { signedWith, storedAttempts, storedDelivery, untilStored, type StoredDelivery } from '../support/deliveries';

/**
 * The embedded engine end to end, over a real HTTPS receiver. Nothing here sleeps and then
 * counts: each test waits for the row it expects, then for the engine to be idle (nothing in
 * flight, nothing due), and only then compares what arrived with what was recorded.
 */

let tls: TestTls;
let t: TestApp;
const receivers: HttpsReceiver[] = [];

async function receiver(respond: (index: number) => ReceiverAction): Promise<HttpsReceiver> {
  const r = await startHttpsReceiver({ tls, respond: (i) => respond(i) });
  receivers.push(r);
  return r;
}

async function createEndpoint(app: TestApp, tenant: Tenant, url: string): Promise<{ id: string; secret: string }> {
  const created = await rest(app.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  return { id: created.body.endpoint.id, secret: created.body.signingSecret };
}

async function sendTest(app: TestApp, tenant: Tenant, endpointId: string): Promise<string> {
  const test = await rest(app.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  return test.body.delivery.id as string;
}

interface Running {
  orm: TestApp['orm'];
  app: App;
}

/** Waits for the row to match, then for the engine to have nothing left to do. */
async function settled(running: Running, id: string, predicate: (row: StoredDelivery) => boolean, timeoutMs?: number): Promise<StoredDelivery> {
  await untilStored(running.orm, id, predicate, timeoutMs);
  await running.app.delivery.embedded!.idle();
  return storedDelivery(running.orm, id);
}

/** Arrivals equal the attempts recorded (and attempt_count), every one signed, and at most one success. */
async function expectArrivalsMatchAttempts(running: Running, id: string, receiver: HttpsReceiver, secret: string): Promise<void> {
  const attempts = await storedAttempts(running.orm, id);
  const row = await storedDelivery(running.orm, id);
  expect(attempts.every((a) => a.dispatched_at !== null)).toBe(true);
  expect(receiver.requests).toHaveLength(attempts.length);
  expect(row.attempt_count).toBe(attempts.length);
  expect(attempts.map((a) => a.attempt)).toEqual(attempts.map((_, i) => i + 1));
  for (const request of receiver.requests) expect(signedWith(request, secret)).toBe(true);
  expect(new Set(receiver.requests.map((q) => JSON.parse(q.rawBody).id)).size).toBe(receiver.requests.length > 0 ? 1 : 0);
  const successes = attempts.filter((a) => a.response_status !== null && a.response_status >= 200 && a.response_status < 300);
  expect(successes).toHaveLength(row.status === 'delivered' ? 1 : 0);
}

beforeAll(async () => {
  tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '100' });
});
afterAll(async () => {
  for (const r of receivers) await r.close();
  await t?.close();
});

it('500 every time: exactly 8 signed attempts, then dead-lettered and listed for operators', async () => {
  const tenant = await t.tenant();
  const r = await receiver(() => ({ status: 500 }));
  const endpoint = await createEndpoint(t, tenant, `${r.url}/hook`);
  const id = await sendTest(t, tenant, endpoint.id);
  const final = await settled(t, id, (x) => x.status === 'dead_lettered');
  expect(final).toMatchObject({ attempt_count: 8, next_attempt_at: null });
  expect(final.last_error).toContain('500');
  expect(r.requests).toHaveLength(8);
  await expectArrivalsMatchAttempts(t, id, r, endpoint.secret);
  const dead = await t.orm.em.fork().execute('select * from dead_letters where delivery_id = ?', [id]);
  expect(dead).toHaveLength(1);
  expect(dead[0]!.organization_id).toBe(tenant.organizationId);
  const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
  const listed = await operator.listDeadLetters({ organizationId: tenant.organizationId });
  expect(listed.deadLetters).toHaveLength(1);
  expect(listed.deadLetters[0]).toMatchObject({ deliveryId: id, endpointId: endpoint.id, attemptCount: 8, eventType: 'webhook.test' });
  expect(listed.deadLetters[0]!.lastError).toContain('500');
});

it('500 twice then 200: delivered on attempt 3 with 3 requests', async () => {
  const tenant = await t.tenant();
  const r = await receiver((i) => (i < 2 ? { status: 500 } : { status: 200 }));
  const endpoint = await createEndpoint(t, tenant, `${r.url}/hook`);
  const id = await sendTest(t, tenant, endpoint.id);
  const final = await settled(t, id, (x) => x.status === 'delivered');
  expect(final).toMatchObject({ attempt_count: 3, last_error: null, last_response_status: 200 });
  expect(r.requests).toHaveLength(3);
  await expectArrivalsMatchAttempts(t, id, r, endpoint.secret);
  const dead = await t.orm.em.fork().execute('select * from dead_letters where delivery_id = ?', [id]);
  expect(dead).toHaveLength(0);
});

it('kill switch on: nothing is sent and the row is held; off: it goes out once', async () => {
  const tenant = await t.tenant();
  const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
  await operator.setKillSwitch({ organizationId: tenant.organizationId, enabled: true, reason: 'incident 42' });
  const r = await receiver(() => ({ status: 200 }));
  const endpoint = await createEndpoint(t, tenant, `${r.url}/hook`);
  const id = await sendTest(t, tenant, endpoint.id);
  const held = await settled(t, id, (x) => x.status === 'held');
  expect(held.attempt_count).toBe(0);
  expect(r.requests).toHaveLength(0);
  const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.body.endpoints[0].recentDeliveries[0]).toMatchObject({ id, status: 'held' });
  await operator.setKillSwitch({ organizationId: tenant.organizationId, enabled: false, reason: '' });
  const final = await settled(t, id, (x) => x.status === 'delivered');
  expect(final.attempt_count).toBe(1);
  expect(r.requests).toHaveLength(1);
  await expectArrivalsMatchAttempts(t, id, r, endpoint.secret);
});

it('the same (endpoint, event) cannot be inserted twice', async () => {
  const tenant = await t.tenant();
  const r = await receiver(() => ({ status: 200 }));
  const endpoint = await createEndpoint(t, tenant, `${r.url}/hook`);
  const em = t.orm.em.fork();
  const insert = (id: string) =>
    em.execute(
      `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, created_at, updated_at)
       values (?, ?, ?, 'evt_dup', 'webhook.test', '{}', 'delivered', 1, 'wf', now(), now())`,
      [id, tenant.organizationId, endpoint.id],
      'run',
    );
  await insert('00000000-0000-4000-8000-000000000001');
  await expect(insert('00000000-0000-4000-8000-000000000002')).rejects.toThrow(/webhook_deliveries_event_unique|duplicate key|unique/i);
  const rows = await t.orm.em.fork().execute(`select id from webhook_deliveries where endpoint_id = ? and event_id = 'evt_dup'`, [endpoint.id]);
  expect(rows).toHaveLength(1);
});

describe('with a retry interval long enough to act between attempts', () => {
  // What these tests do between two attempts takes milliseconds; 8 s leaves no room for
  // load to let the next attempt go first.
  const INTERVAL_MS = 8000;
  let slow: TestApp;
  beforeAll(async () => {
    slow = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS) });
  });
  afterAll(async () => slow?.close());

  it('while retrying, the list shows retrying, attemptCount, nextAttemptAt and lastError', async () => {
    const tenant = await slow.tenant();
    const r = await receiver(() => ({ status: 503 }));
    const endpoint = await createEndpoint(slow, tenant, `${r.url}/hook`);
    const id = await sendTest(slow, tenant, endpoint.id);
    const retrying = await settled(slow, id, (x) => x.status === 'retrying');
    const [attempt] = await storedAttempts(slow.orm, id);
    expect(retrying.next_attempt_at).toBe(attempt!.finished_at! + INTERVAL_MS);
    const list = await rest(slow.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect(list.status).toBe(200);
    const d = list.body.endpoints[0].recentDeliveries[0];
    expect(d).toMatchObject({ id, status: 'retrying', attemptCount: 1, lastResponseStatus: 503 });
    expect(d.lastError).toContain('503');
    expect(Date.parse(d.nextAttemptAt)).toBe(retrying.next_attempt_at);
    await expectArrivalsMatchAttempts(slow, id, r, endpoint.secret);
  });

  it('endpoint deleted between attempts: failed with a reason, no further requests', async () => {
    const tenant = await slow.tenant();
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await createEndpoint(slow, tenant, `${r.url}/hook`);
    const id = await sendTest(slow, tenant, endpoint.id);
    await settled(slow, id, (x) => x.status === 'retrying');
    const deleted = await rest(slow.url, 'DELETE', `/api/v1/webhooks/${endpoint.id}`, { apiKey: tenant.apiKey });
    expect(deleted.status).toBe(200);
    expect(deleted.body.endpoint.disabled).toBe(true);
    const final = await settled(slow, id, (x) => x.status === 'failed', INTERVAL_MS + 20_000);
    expect(final.last_error).toMatch(/disabled/i);
    expect(final).toMatchObject({ attempt_count: 1, next_attempt_at: null });
    expect(r.requests).toHaveLength(1);
    await expectArrivalsMatchAttempts(slow, id, r, endpoint.secret);
    const dead = await slow.orm.em.fork().execute('select * from dead_letters where delivery_id = ?', [id]);
    expect(dead).toHaveLength(0);
  }, INTERVAL_MS + 30_000);
});

it('a restart mid-retry resumes the delivery without a duplicate attempt', async () => {
  const first = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '1000' });
  const env = { ...TEST_ENV, DATABASE_URL: first.databaseUrl, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '1000' };
  let second: Running | null = null;
  try {
    const tenant = await first.tenant();
    const r = await receiver((i) => (i < 2 ? { status: 500 } : { status: 200 }));
    const endpoint = await createEndpoint(first, tenant, `${r.url}/hook`);
    const id = await sendTest(first, tenant, endpoint.id);
    await untilStored(first.orm, id, (x) => x.status === 'retrying' && x.attempt_count === 1);
    await first.app.close();
    const orm = await openDatabase(databaseAt(first.databaseUrl), { pool: { min: 0, max: 10 } });
    const app = await start({ config: loadConfig(env), orm, logger: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent') });
    second = { app, orm };
    const final = await settled(second, id, (x) => x.status === 'delivered', 15_000);
    expect(final.attempt_count).toBe(3);
    await expectArrivalsMatchAttempts(second, id, r, endpoint.secret);
    const attempts = await storedAttempts(orm, id);
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
  } finally {
    if (second) {
      await second.app.close();
      await second.orm.close();
    }
    first.app.close = async () => undefined;
    await first.close();
  }
});
