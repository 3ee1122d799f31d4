import { createHmac } from 'node:crypto';
import { startTestApp, TEST_ENV, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/config/logger';
import { openDatabase } from '../../src/db';
import { start } from '../../src/server';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

async function row(app: { orm: TestApp['orm'] }, id: string): Promise<any> {
  const [r] = await app.orm.em.fork().execute('select * from webhook_deliveries where id = ?', [id]);
  return r;
}

async function waitForRow(app: { orm: TestApp['orm'] }, id: string, predicate: (r: any) => boolean, timeoutMs = 10_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await row(app, id);
    if (r && predicate(r)) return r;
    if (Date.now() > deadline) throw new Error(`row ${id} never matched; last: ${JSON.stringify(r)}`);
    await sleep(25);
  }
}

function expectSigned(request: { headers: any; rawBody: string }, secret: string): void {
  const ts = request.headers['x-service-timestamp'] as string;
  expect(ts).toMatch(/^\d+$/);
  const expected = createHmac('sha256', secret).update(`${ts}.${request.rawBody}`).digest('hex');
  expect(request.headers['x-service-signature']).toBe(expected);
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
  const final = await waitForRow(t, id, (x) => x.status === 'dead_lettered');
  expect(final.attempt_count).toBe(8);
  expect(final.next_attempt_at).toBeNull();
  expect(final.last_error).toContain('500');
  await sleep(400);
  expect(r.requests).toHaveLength(8);
  for (const request of r.requests) expectSigned(request, endpoint.secret);
  // The same event on every attempt.
  expect(new Set(r.requests.map((q) => JSON.parse(q.rawBody).id)).size).toBe(1);
  const attempts = await t.orm.em.fork().execute('select attempt from delivery_attempts where delivery_id = ? order by attempt', [id]);
  expect(attempts.map((a: any) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
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
  const final = await waitForRow(t, id, (x) => x.status === 'delivered');
  expect(final.attempt_count).toBe(3);
  expect(final.last_error).toBeNull();
  expect(final.last_response_status).toBe(200);
  await sleep(300);
  expect(r.requests).toHaveLength(3);
  for (const request of r.requests) expectSigned(request, endpoint.secret);
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
  const held = await waitForRow(t, id, (x) => x.status === 'held');
  expect(held.attempt_count).toBe(0);
  await sleep(500);
  expect(r.requests).toHaveLength(0);
  expect((await row(t, id)).status).toBe('held');
  const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.body.endpoints[0].recentDeliveries[0]).toMatchObject({ id, status: 'held' });
  await operator.setKillSwitch({ organizationId: tenant.organizationId, enabled: false, reason: '' });
  const final = await waitForRow(t, id, (x) => x.status === 'delivered');
  expect(final.attempt_count).toBe(1);
  await sleep(300);
  expect(r.requests).toHaveLength(1);
  expectSigned(r.requests[0]!, endpoint.secret);
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

describe('with a slower retry interval', () => {
  let slow: TestApp;
  beforeAll(async () => {
    slow = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '1500' });
  });
  afterAll(async () => slow?.close());

  it('while retrying, the list shows retrying, attemptCount, nextAttemptAt and lastError', async () => {
    const tenant = await slow.tenant();
    const r = await receiver((i) => (i === 0 ? { status: 503 } : { status: 200 }));
    const endpoint = await createEndpoint(slow, tenant, `${r.url}/hook`);
    const id = await sendTest(slow, tenant, endpoint.id);
    await waitForRow(slow, id, (x) => x.status === 'retrying');
    const list = await rest(slow.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect(list.status).toBe(200);
    const d = list.body.endpoints[0].recentDeliveries[0];
    expect(d).toMatchObject({ id, status: 'retrying', attemptCount: 1, lastResponseStatus: 503 });
    expect(d.lastError).toContain('503');
    const next = Date.parse(d.nextAttemptAt);
    expect(next).toBeGreaterThan(Date.now() - 200);
    expect(next).toBeLessThanOrEqual(Date.now() + 1600);
    const final = await waitForRow(slow, id, (x) => x.status === 'delivered');
    expect(final.attempt_count).toBe(2);
    expect(r.requests).toHaveLength(2);
  });

  it('endpoint deleted between attempts: failed with a reason, no further requests', async () => {
    const tenant = await slow.tenant();
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await createEndpoint(slow, tenant, `${r.url}/hook`);
    const id = await sendTest(slow, tenant, endpoint.id);
    await waitForRow(slow, id, (x) => x.status === 'retrying');
    const deleted = await rest(slow.url, 'DELETE', `/api/v1/webhooks/${endpoint.id}`, { apiKey: tenant.apiKey });
    expect(deleted.status).toBe(200);
    expect(deleted.body.endpoint.disabled).toBe(true);
    const final = await waitForRow(slow, id, (x) => x.status === 'failed');
    expect(final.last_error).toMatch(/disabled/i);
    expect(final.attempt_count).toBe(1);
    expect(final.next_attempt_at).toBeNull();
    await sleep(2000);
    expect(r.requests).toHaveLength(1);
    expect((await row(slow, id)).status).toBe('failed');
    const dead = await slow.orm.em.fork().execute('select * from dead_letters where delivery_id = ?', [id]);
    expect(dead).toHaveLength(0);
  });
});

it('a restart mid-retry resumes the delivery without a duplicate attempt', async () => {
  const first = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '1000' });
  const env = { ...TEST_ENV, DATABASE_URL: first.databaseUrl, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '1000' };
  let second: { app: Awaited<ReturnType<typeof start>>; orm: TestApp['orm'] } | null = null;
  try {
    const tenant = await first.tenant();
    const r = await receiver((i) => (i < 2 ? { status: 500 } : { status: 200 }));
    const endpoint = await createEndpoint(first, tenant, `${r.url}/hook`);
    const id = await sendTest(first, tenant, endpoint.id);
    await waitForRow(first, id, (x) => x.status === 'retrying' && x.attempt_count === 1);
    await first.app.close();
    const orm = await openDatabase(first.databaseUrl, { pool: { min: 0, max: 10 } });
    const app = await start({ config: loadConfig(env), orm, logger: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent') });
    second = { app, orm };
    const final = await waitForRow(second, id, (x) => x.status === 'delivered', 15_000);
    expect(final.attempt_count).toBe(3);
    await sleep(300);
    expect(r.requests).toHaveLength(final.attempt_count);
    for (const request of r.requests) expectSigned(request, endpoint.secret);
    const dupes = await orm.em.fork().execute(
      'select delivery_id, attempt, count(*)::int as n from delivery_attempts group by delivery_id, attempt having count(*) > 1',
    );
    expect(dupes).toEqual([]);
    const attempts = await orm.em.fork().execute('select attempt from delivery_attempts where delivery_id = ? order by attempt', [id]);
    expect(attempts.map((a: any) => a.attempt)).toEqual([1, 2, 3]);
  } finally {
    if (second) {
      await second.app.close();
      await second.orm.close();
    }
    first.app.close = async () => undefined;
    await first.close();
  }
});
