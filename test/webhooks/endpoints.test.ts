import { randomUUID } from 'node:crypto';
import { Code } from '@connectrpc/connect';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { failureOf } from '../support/clients';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ DELIVERY_POLL_INTERVAL_MS: '50' }, { listen: false });
});
afterAll(async () => t?.close());

const good = 'https://127.0.0.1:9/hook';

const refusals: [string, Record<string, unknown>, string][] = [
  ['http://', { url: 'http://127.0.0.1:9/hook' }, 'WEBHOOK_URL_NOT_HTTPS'],
  ['missing url', {}, 'WEBHOOK_URL_REQUIRED'],
  ['credentials', { url: 'https://user:pass@127.0.0.1:9/hook' }, 'WEBHOOK_URL_HAS_CREDENTIALS'],
  ['fragment', { url: 'https://127.0.0.1:9/hook#frag' }, 'WEBHOOK_URL_HAS_FRAGMENT'],
  ['2049-char url', { url: `https://127.0.0.1:9/${'a'.repeat(2049 - 'https://127.0.0.1:9/'.length)}` }, 'WEBHOOK_URL_TOO_LONG'],
  ['501-char description', { url: good, description: 'd'.repeat(501) }, 'WEBHOOK_DESCRIPTION_TOO_LONG'],
  ['bad event name', { url: good, eventNames: ['Bad Name'] }, 'EVENT_NAME_INVALID'],
  ['21 event names', { url: good, eventNames: Array.from({ length: 21 }, (_, i) => `event.n${i}`) }, 'TOO_MANY_EVENT_NAMES'],
];

async function endpointCount(organizationId: string): Promise<number> {
  const [r] = await t.orm.em.fork().execute('select count(*)::int as n from webhook_endpoints where organization_id = ?', [organizationId]);
  return r!.n;
}

describe('create refusals', () => {
  let tenant: Tenant;
  beforeAll(async () => {
    tenant = await t.tenant();
  });

  it.each(refusals)('REST: %s', async (_name, body, code) => {
    if (code === 'WEBHOOK_URL_TOO_LONG') expect((body.url as string).length).toBe(2049);
    const res = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code });
    expect(await endpointCount(tenant.organizationId)).toBe(0);
  });

  it.each(refusals)('gRPC: %s', async (_name, body, code) => {
    const webhooks = t.client(WebhookService, tenant.apiKey);
    const failure = await failureOf(webhooks.createWebhook(body as any));
    expect(failure).toEqual({ code: Code.InvalidArgument, reason: code });
    expect(await endpointCount(tenant.organizationId)).toBe(0);
  });

  it('accepts exactly 2048 characters, 500-character descriptions and 20 event names', async () => {
    const url = `https://127.0.0.1:9/${'a'.repeat(2048 - 'https://127.0.0.1:9/'.length)}`;
    const res = await t.rest('POST', '/api/v1/webhooks', {
      apiKey: tenant.apiKey,
      body: { url, description: 'd'.repeat(500), eventNames: Array.from({ length: 20 }, (_, i) => `event.n${i}`) },
    });
    expect(res.status).toBe(200);
    expect(res.body.endpoint.eventNames).toHaveLength(20);
  });
});

it('returns the whsec_ secret once, never in lists, and stores it encrypted', async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good, description: 'mine' } });
  expect(created.status).toBe(200);
  const secret = created.body.signingSecret as string;
  expect(secret).toMatch(/^whsec_.{16,}$/);
  expect(created.body.endpoint).toMatchObject({ url: good, description: 'mine', eventNames: ['webhook.test'] });
  expect(created.body.endpoint.disabled ?? false).toBe(false);
  const grpcCreated = await t.client(WebhookService, tenant.apiKey).createWebhook({ url: good });
  expect(grpcCreated.signingSecret).toMatch(/^whsec_/);
  expect(grpcCreated.signingSecret).not.toBe(secret);

  const list = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.status).toBe(200);
  const text = JSON.stringify(list.body);
  expect(text).not.toContain(secret);
  expect(text).not.toContain(grpcCreated.signingSecret);
  expect(text).not.toContain('whsec_');
  const grpcList = await t.client(WebhookService, tenant.apiKey).listWebhooks({});
  const grpcText = JSON.stringify(grpcList, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
  expect(grpcText).not.toContain('whsec_');

  const [stored] = await t.orm.em.fork().execute('select secret_ciphertext from webhook_endpoints where id = ?', [created.body.endpoint.id]);
  const bytes: Buffer = Buffer.from(stored!.secret_ciphertext);
  expect(bytes.length).toBeGreaterThan(0);
  expect(bytes.includes(Buffer.from(secret))).toBe(false);
  expect(bytes.includes(Buffer.from(secret.slice('whsec_'.length)))).toBe(false);
  expect(bytes.includes(Buffer.from('whsec_'))).toBe(false);
});

it('lists the five most recent deliveries per endpoint, newest first, for several endpoints', async () => {
  const tenant = await t.tenant();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good } });
    ids.push(created.body.endpoint.id);
  }
  const em = t.orm.em.fork();
  const base = Date.UTC(2026, 0, 1);
  const expected = new Map<string, string[]>();
  // Endpoint 0 gets 7 deliveries, endpoint 1 gets 5, endpoint 2 gets 2; insertion order is not time order.
  const counts = [7, 5, 2];
  for (const [e, endpointId] of ids.entries()) {
    const rows: { id: string; at: number }[] = [];
    for (let i = 0; i < counts[e]!; i++) {
      const id = randomUUID();
      const at = base + ((i * 3) % counts[e]!) * 60_000 + e;
      rows.push({ id, at });
      await em.execute(
        `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, created_at, updated_at)
         values (?, ?, ?, ?, 'webhook.test', '{}', 'delivered', 1, 'wf', ?, ?)`,
        [id, tenant.organizationId, endpointId, `evt_${e}_${i}`, new Date(at), new Date(at)],
        'run',
      );
    }
    expected.set(endpointId, rows.sort((a, b) => b.at - a.at).slice(0, 5).map((r) => r.id));
  }
  const list = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.status).toBe(200);
  expect(list.body.endpoints).toHaveLength(3);
  for (const endpoint of list.body.endpoints) {
    expect(endpoint.recentDeliveries.map((d: any) => d.id)).toEqual(expected.get(endpoint.id));
  }
  const grpc = await t.client(WebhookService, tenant.apiKey).listWebhooks({});
  for (const endpoint of grpc.endpoints) {
    expect(endpoint.recentDeliveries.map((d) => d.id)).toEqual(expected.get(endpoint.id));
  }
});

it('lists every field of a delivery as stored, timestamps to the millisecond', async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good } });
  const endpointId = created.body.endpoint.id as string;
  const [retrying, delivered] = [randomUUID(), randomUUID()];
  const em = t.orm.em.fork();
  // Microseconds in storage; the API shows milliseconds, truncated as a Date would. The
  // retrying one is due long after the test, so the running engine leaves it as stored.
  await em.execute(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count,
       next_attempt_at, last_error, last_response_status, workflow_id, delivered_at, created_at, updated_at)
     values (?, ?, ?, 'evt_retrying', 'webhook.test', '{"secret":"payload"}', 'retrying', 3,
       '2099-03-04T05:06:07.891999Z', 'The endpoint answered HTTP 503.', 503, 'wf-retrying', null,
       '2026-03-04T05:05:00.000001Z', '2026-03-04T05:05:37.123456Z'),
            (?, ?, ?, 'evt_delivered', 'webhook.test', '{}', 'delivered', 1,
       null, null, 200, 'wf-delivered', '2026-03-04T05:00:00.250999Z',
       '2026-03-04T05:00:00.000999Z', '2026-03-04T05:00:00.250999Z')`,
    [retrying, tenant.organizationId, endpointId, delivered, tenant.organizationId, endpointId],
    'run',
  );
  const list = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.status).toBe(200);
  expect(list.body.endpoints[0].recentDeliveries).toEqual([
    {
      id: retrying,
      endpointId,
      eventId: 'evt_retrying',
      eventType: 'webhook.test',
      status: 'retrying',
      attemptCount: 3,
      nextAttemptAt: '2099-03-04T05:06:07.891Z',
      lastError: 'The endpoint answered HTTP 503.',
      lastResponseStatus: 503,
      createdAt: '2026-03-04T05:05:00Z',
      updatedAt: '2026-03-04T05:05:37.123Z',
      workflowId: 'wf-retrying',
      payloadState: 'available',
    },
    {
      id: delivered,
      endpointId,
      eventId: 'evt_delivered',
      eventType: 'webhook.test',
      status: 'delivered',
      attemptCount: 1,
      lastResponseStatus: 200,
      createdAt: '2026-03-04T05:00:00Z',
      updatedAt: '2026-03-04T05:00:00.250Z',
      deliveredAt: '2026-03-04T05:00:00.250Z',
      workflowId: 'wf-delivered',
      payloadState: 'available',
    },
  ]);
  const grpc = await t.client(WebhookService, tenant.apiKey).listWebhooks({});
  const [first, second] = grpc.endpoints[0]!.recentDeliveries;
  expect(first).toMatchObject({ id: retrying, attemptCount: 3, lastResponseStatus: 503 });
  expect(first!.deliveredAt).toBeUndefined();
  expect(first!.nextAttemptAt).toMatchObject({ seconds: BigInt(Date.UTC(2099, 2, 4, 5, 6, 7) / 1000), nanos: 891_000_000 });
  expect(second!.deliveredAt).toMatchObject({ seconds: BigInt(Date.UTC(2026, 2, 4, 5, 0, 0) / 1000), nanos: 250_000_000 });
});

it('delete disables the endpoint and keeps it listed with its history', async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good } });
  const id = created.body.endpoint.id as string;
  const deliveryId = randomUUID();
  await t.orm.em.fork().execute(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, created_at, updated_at)
     values (?, ?, ?, 'evt_keep', 'webhook.test', '{}', 'delivered', 1, 'wf', now(), now())`,
    [deliveryId, tenant.organizationId, id],
    'run',
  );
  const deleted = await t.rest('DELETE', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey });
  expect(deleted.status).toBe(200);
  expect(deleted.body.endpoint).toMatchObject({ id, disabled: true });
  expect(deleted.body.endpoint.disabledAt).toBeTruthy();
  const list = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.body.endpoints).toHaveLength(1);
  expect(list.body.endpoints[0]).toMatchObject({ id, disabled: true });
  expect(list.body.endpoints[0].recentDeliveries.map((d: any) => d.id)).toEqual([deliveryId]);
  // Deleting twice is harmless; testing a disabled endpoint is refused.
  expect((await t.rest('DELETE', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey })).status).toBe(200);
  const test = await t.rest('POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey });
  expect({ status: test.status, code: test.body.code }).toEqual({ status: 409, code: 'WEBHOOK_DISABLED' });
  const [row] = await t.orm.em.fork().execute('select count(*)::int as n from webhook_deliveries where endpoint_id = ?', [id]);
  expect(row!.n).toBe(1);
});

it("another organization's endpoint is not found for test and delete, and nothing changes", async () => {
  const owner = await t.tenant();
  const other = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: owner.apiKey, body: { url: good } });
  const id = created.body.endpoint.id as string;
  for (const [method, path] of [
    ['POST', `/api/v1/webhooks/${id}/test`],
    ['DELETE', `/api/v1/webhooks/${id}`],
  ] as const) {
    const res = await t.rest(method, path, { apiKey: other.apiKey });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'WEBHOOK_NOT_FOUND' });
  }
  const webhooks = t.client(WebhookService, other.apiKey);
  expect(await failureOf(webhooks.testWebhook({ id }))).toEqual({ code: Code.NotFound, reason: 'WEBHOOK_NOT_FOUND' });
  expect(await failureOf(webhooks.deleteWebhook({ id }))).toEqual({ code: Code.NotFound, reason: 'WEBHOOK_NOT_FOUND' });
  // Non-uuid and unknown ids are not found too.
  expect(await failureOf(webhooks.deleteWebhook({ id: 'not-a-uuid' }))).toEqual({ code: Code.NotFound, reason: 'WEBHOOK_NOT_FOUND' });

  const [endpoint] = await t.orm.em.fork().execute('select disabled_at from webhook_endpoints where id = ?', [id]);
  expect(endpoint!.disabled_at).toBeNull();
  const [deliveries] = await t.orm.em.fork().execute('select count(*)::int as n from webhook_deliveries where endpoint_id = ?', [id]);
  expect(deliveries!.n).toBe(0);
  const usage = await t.orm.em.fork().execute('select * from delivery_usage where organization_id in (?, ?)', [owner.organizationId, other.organizationId]);
  expect(usage).toEqual([]);
  expect((await t.rest('GET', '/api/v1/webhooks', { apiKey: other.apiKey })).body.endpoints ?? []).toEqual([]);
  const ownerList = await t.rest('GET', '/api/v1/webhooks', { apiKey: owner.apiKey });
  expect(ownerList.body.endpoints[0]).toMatchObject({ id });
  expect(ownerList.body.endpoints[0].disabled ?? false).toBe(false);
});

it('answers a list, a create and a delete with the same JSON over REST as over Connect, byte for byte', async () => {
  const tenant = await t.tenant();
  const headers = { authorization: `Bearer ${tenant.apiKey}`, 'content-type': 'application/json' };
  const connect = async (method: string, body: unknown) => {
    const answer = await t.fetch(`/publishing.v1.WebhookService/${method}`, { method: 'POST', headers, body: JSON.stringify(body) });
    expect(answer.status).toBe(200);
    return answer.text();
  };
  const rest = async (method: string, path: string, body?: unknown) => {
    const answer = await t.fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    expect(answer.status).toBe(200);
    const text = await answer.text();
    expect(answer.headers.get('content-length')).toBe(String(Buffer.byteLength(text)));
    return text;
  };
  const created = await rest('POST', '/api/v1/webhooks', { url: good, description: 'Ünïcödé "quoted" \u2028 😀', eventNames: ['post.published'] });
  const viaConnect = await connect('CreateWebhook', { url: good, description: 'Ünïcödé "quoted" \u2028 😀', eventNames: ['post.published'] });
  const shape = (json: string) => JSON.stringify(Object.keys(JSON.parse(json).endpoint)) + JSON.stringify(Object.keys(JSON.parse(json)));
  expect(shape(created)).toBe(shape(viaConnect));
  const first = JSON.parse(created).endpoint.id as string;
  await rest('POST', '/api/v1/webhooks', { url: good });
  expect(await rest('DELETE', `/api/v1/webhooks/${first}`)).toBe(await connect('DeleteWebhook', { id: first }));
  // Retried long after the test, so the engine leaves it as it is between the two answers.
  await t.orm.em.fork().execute(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count,
       next_attempt_at, last_error, last_response_status, workflow_id, created_at, updated_at)
     values (?, ?, ?, 'evt_1', 'webhook.test', '{}', 'retrying', 2, '2099-03-04T05:06:07.891999Z', 'ünïcödé\n"error"', 503, 'wf', '2026-03-04T05:05:00Z', now())`,
    [randomUUID(), tenant.organizationId, first],
    'run',
  );
  for (const pageSize of [0, 1, 2]) {
    const page = await rest('GET', `/api/v1/webhooks?pageSize=${pageSize}`);
    expect(page).toBe(await connect('ListWebhooks', { pageSize }));
    const token = JSON.parse(page).nextPageToken as string | undefined;
    if (token) expect(await rest('GET', `/api/v1/webhooks?pageSize=${pageSize}&pageToken=${token}`)).toBe(await connect('ListWebhooks', { pageSize, pageToken: token }));
  }
});
