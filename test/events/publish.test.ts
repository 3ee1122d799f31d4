import { randomUUID } from 'node:crypto';
import { Code, ConnectError } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { loadConfig } from '../../src/config';
import { DeliveryRecords, workflowIdFor } from '../../src/delivery';
import { EventPublisher, type PublishedEvent } from '../../src/events';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest, type TransportName } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { within } from '../support/within';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

const SCHEDULER_TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const BILLING_TOKEN = 'billing-token-0123456789abcdef0123456789abc';
const TRANSPORTS: TransportName[] = ['grpc', 'connect'];

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls });
  t = await startTestApp({
    INTERNAL_SERVICE_TOKENS: `scheduler:${SCHEDULER_TOKEN},billing:${BILLING_TOKEN}`,
    DELIVERY_EXTRA_CA_PEM: tls.caPem,
  });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

async function failureOf(call: Promise<unknown>): Promise<{ code: Code; reason?: string; metadata: Record<string, string> }> {
  try {
    await call;
  } catch (error) {
    const connectError = ConnectError.from(error);
    const [info] = connectError.findDetails(ErrorInfoSchema);
    return { code: connectError.code, reason: info?.reason, metadata: info?.metadata ?? {} };
  }
  throw new Error('the call succeeded but a failure was expected');
}

async function endpoint(tenant: Tenant, eventNames: string[]): Promise<string> {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames } });
  expect(created.status).toBe(200);
  return created.body.endpoint.id as string;
}

async function deliveryRows(eventId: string): Promise<{ endpoint_id: string; status: string }[]> {
  return t.orm.em.fork().execute('select endpoint_id, status from webhook_deliveries where event_id = ? order by endpoint_id', [eventId]);
}

async function eventRows(eventId: string): Promise<{ publisher: string }[]> {
  return t.orm.em.fork().execute('select publisher from events where event_id = ?', [eventId]);
}

const newEventId = () => `evt_${randomUUID()}`;

async function enterpriseNearQuota(quota: number, counted: number | null, endpoints: number): Promise<Tenant> {
  const tenant = await t.tenant({ plan: 'enterprise' });
  await client(OperatorService, t.url, 'grpc', t.config.operatorToken).setDeliveryQuota({ organizationId: tenant.organizationId, monthlyDeliveries: BigInt(quota) });
  if (counted !== null) {
    await t.orm.em.fork().execute(
      `insert into delivery_usage (organization_id, month, deliveries) values (?, date_trunc('month', now() at time zone 'utc')::date, ?)`,
      [tenant.organizationId, counted],
    );
  }
  for (let i = 0; i < endpoints; i++) await endpoint(tenant, ['post.held']);
  return tenant;
}

async function countedOf(tenant: Tenant): Promise<number> {
  const [usage] = await t.orm.em.fork().execute<{ deliveries: string }[]>('select deliveries from delivery_usage where organization_id = ?', [tenant.organizationId]);
  return Number(usage!.deliveries);
}

describe.each(TRANSPORTS)('EventService over %s', (transport) => {
  const events = () => client(EventService, t.url, transport, SCHEDULER_TOKEN);

  it('delivers to the active endpoints of the organization subscribed to the type, and no others', async () => {
    const tenant = await t.tenant();
    const other = await t.tenant();
    const held = await endpoint(tenant, ['post.held']);
    const both = await endpoint(tenant, ['connection.verified', 'post.held']);
    await endpoint(tenant, ['connection.verified']);
    const disabled = await endpoint(tenant, ['post.held']);
    expect((await rest(t.url, 'DELETE', `/api/v1/webhooks/${disabled}`, { apiKey: tenant.apiKey })).status).toBe(200);
    await endpoint(other, ['post.held']);

    const eventId = newEventId();
    const { event } = await events().publishEvent({
      organizationId: tenant.organizationId,
      eventId,
      eventType: 'post.held',
      payload: { postId: 'p_1', reason: 'connection_disabled' },
    });
    expect(event).toMatchObject({ organizationId: tenant.organizationId, eventId, eventType: 'post.held', publisher: 'scheduler', replayed: false, skippedReason: '' });
    const delivered = [...event!.deliveries].sort((a, b) => a.endpointId.localeCompare(b.endpointId));
    expect(delivered.map((d) => d.endpointId)).toEqual([held, both].sort());
    for (const d of delivered) {
      expect(d.workflowId).toBe(workflowIdFor({ organizationId: tenant.organizationId, endpointId: d.endpointId, eventId }));
      expect(d.deliveryId).toMatch(/^[0-9a-f-]{36}$/);
      expect(['pending', 'delivered']).toContain(d.status);
    }
    expect((await deliveryRows(eventId)).map((r) => r.endpoint_id)).toEqual([held, both].sort());
    expect(await eventRows(eventId)).toEqual([{ publisher: 'scheduler' }]);
  });

  it('records nothing new when the same event is published again, and answers with the same deliveries', async () => {
    const tenant = await t.tenant();
    await endpoint(tenant, ['post.released']);
    await endpoint(tenant, ['post.released']);
    const request = { organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.released', payload: { postId: 'p_2' } };
    const first = await events().publishEvent(request);
    const again = await client(EventService, t.url, transport, BILLING_TOKEN).publishEvent(request);
    expect(again.event?.replayed).toBe(true);
    // The first publisher stays the one recorded.
    expect(again.event?.publisher).toBe('scheduler');
    const ids = (e: typeof first) => e.event!.deliveries.map((d) => d.deliveryId).sort();
    expect(ids(again)).toEqual(ids(first));
    expect(await deliveryRows(request.eventId)).toHaveLength(2);
    expect(await eventRows(request.eventId)).toHaveLength(1);
  });

  it('refuses the same event id with another type or payload as EVENT_CONFLICT', async () => {
    const tenant = await t.tenant();
    await endpoint(tenant, ['post.held', 'post.released']);
    const request = { organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held', payload: { postId: 'p_3' } };
    await events().publishEvent(request);
    for (const changed of [{ ...request, eventType: 'post.released' }, { ...request, payload: { postId: 'p_4' } }]) {
      expect(await failureOf(events().publishEvent(changed))).toMatchObject({ code: Code.AlreadyExists, reason: 'EVENT_CONFLICT' });
    }
    expect(await deliveryRows(request.eventId)).toHaveLength(1);
  });

  it('refuses as EVENT_CONFLICT an event id a test delivery to one of its endpoints took, and records nothing', async () => {
    const tenant = await t.tenant();
    const endpointId = await endpoint(tenant, ['post.held']);
    const other = await endpoint(tenant, ['post.held']);
    const test = await rest(t.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
    expect(test.status).toBe(200);
    const [row] = await t.orm.em.fork().execute<{ event_id: string }[]>('select event_id from webhook_deliveries where endpoint_id = ?', [endpointId]);
    const taken = row!.event_id;
    const valid = { organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' };
    for (const call of [
      events().publishEvent({ ...valid, eventId: taken }),
      events().publishEvents({ events: [valid, { ...valid, eventId: taken }] }),
    ]) {
      expect(await failureOf(call)).toMatchObject({ code: Code.AlreadyExists, reason: 'EVENT_CONFLICT' });
    }
    expect(await failureOf(events().publishEvents({ events: [valid, { ...valid, eventId: taken }] }))).toMatchObject({ metadata: { index: '1', eventId: taken } });
    expect(await eventRows(taken)).toEqual([]);
    expect(await eventRows(valid.eventId)).toEqual([]);
    expect(await deliveryRows(taken)).toEqual([{ endpoint_id: endpointId, status: expect.any(String) }]);
    expect(other).not.toBe(endpointId);
  });

  it('refuses what it cannot publish with a stable code, and records nothing', async () => {
    const tenant = await t.tenant();
    await endpoint(tenant, ['post.held']);
    const valid = { organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held', payload: {} };
    const cases: [string, Partial<typeof valid> & { payload?: Record<string, string> }][] = [
      ['EVENT_TYPE_INVALID', { eventType: 'Post.Held' }],
      ['EVENT_TYPE_INVALID', { eventType: 'post' }],
      ['EVENT_TYPE_INVALID', { eventType: `post.${'x'.repeat(64)}` }],
      ['EVENT_TYPE_RESERVED', { eventType: 'webhook.test' }],
      ['EVENT_PAYLOAD_TOO_LARGE', { payload: { text: 'x'.repeat(256 * 1024) } }],
      ['EVENT_ID_INVALID', { eventId: '' }],
      ['EVENT_ID_INVALID', { eventId: 'x'.repeat(129) }],
      ['EVENT_ID_INVALID', { eventId: 'evt 1' }],
      ['EVENT_ID_INVALID', { eventId: 'evt/1' }],
      ['EVENT_ID_INVALID', { eventId: '-evt' }],
      ['ORGANIZATION_NOT_FOUND', { organizationId: randomUUID() }],
      ['ORGANIZATION_NOT_FOUND', { organizationId: 'not-an-id' }],
    ];
    for (const [reason, change] of cases) {
      const failure = await failureOf(events().publishEvent({ ...valid, ...change }));
      expect({ change: Object.keys(change), reason: failure.reason }).toEqual({ change: Object.keys(change), reason });
    }
    expect(await deliveryRows(valid.eventId)).toEqual([]);
    expect(await eventRows(valid.eventId)).toEqual([]);
    // The limits themselves are accepted.
    const atLimits = { ...valid, eventId: `A${'b'.repeat(127)}`, payload: { text: 'x'.repeat(256 * 1024 - 12) } };
    expect((await events().publishEvent(atLimits)).event?.deliveries).toHaveLength(1);
  });

  it('publishes a batch all together or not at all', async () => {
    const tenant = await t.tenant();
    await endpoint(tenant, ['post.held']);
    const batch = [newEventId(), newEventId(), newEventId()].map((eventId) => ({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' }));
    const refused = await failureOf(events().publishEvents({ events: [...batch.slice(0, 2), { ...batch[2]!, eventType: 'webhook.test' }] }));
    expect(refused).toMatchObject({ code: Code.InvalidArgument, reason: 'EVENT_TYPE_RESERVED', metadata: { index: '2' } });
    // A conflict found while recording (the batch's own first event, changed) rolls back the events before it.
    const conflicting = await failureOf(events().publishEvents({ events: [...batch, { ...batch[0]!, payload: { changed: true } }] }));
    expect(conflicting).toMatchObject({ reason: 'EVENT_CONFLICT', metadata: { index: '3' } });
    for (const { eventId } of batch) expect(await eventRows(eventId)).toEqual([]);

    const { events: published } = await events().publishEvents({ events: batch });
    expect(published.map((e) => e.eventId)).toEqual(batch.map((e) => e.eventId));
    expect(published.every((e) => e.deliveries.length === 1)).toBe(true);

    for (const size of [0, 101]) {
      const many = Array.from({ length: size }, () => ({ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' }));
      expect(await failureOf(events().publishEvents({ events: many }))).toMatchObject({ reason: 'TOO_MANY_EVENTS' });
    }
  });

  it('refuses customer API keys, the operator token and no credential with INTERNAL_CREDENTIAL_REQUIRED', async () => {
    const tenant = await t.tenant();
    const request = { organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' };
    for (const credential of [tenant.apiKey, t.config.operatorToken, undefined, `${SCHEDULER_TOKEN}x`]) {
      const failure = await failureOf(client(EventService, t.url, transport, credential).publishEvent(request));
      expect(failure).toMatchObject({ code: Code.Unauthenticated, reason: 'INTERNAL_CREDENTIAL_REQUIRED' });
    }
    expect(await eventRows(request.eventId)).toEqual([]);
    // Nor does an internal credential open the operator or the customer services.
    expect(await failureOf(client(OperatorService, t.url, transport, SCHEDULER_TOKEN).getKillSwitch({}))).toMatchObject({ reason: 'OPERATOR_CREDENTIAL_REQUIRED' });
    expect(await failureOf(client(WebhookService, t.url, transport, SCHEDULER_TOKEN).listWebhooks({}))).toMatchObject({ reason: 'API_KEY_INVALID' });
  });
});

describe('plans and quotas', () => {
  const events = () => client(EventService, t.url, 'grpc', SCHEDULER_TOKEN);

  it('records the event of an organization whose plan includes no deliveries, with no delivery and the reason', async () => {
    const tenant = await t.tenant({ plan: 'starter' });
    await endpoint(tenant, ['post.held']);
    const eventId = newEventId();
    const { event } = await events().publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' });
    expect(event).toMatchObject({ skippedReason: 'PLAN_EXCLUDES_WEBHOOKS', deliveries: [] });
    expect(await eventRows(eventId)).toHaveLength(1);
    expect(await deliveryRows(eventId)).toEqual([]);
  });

  it('counts each delivery once and records those over the quota as failed with the reason', async () => {
    const tenant = await t.tenant({ plan: 'enterprise' });
    const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
    await operator.setDeliveryQuota({ organizationId: tenant.organizationId, monthlyDeliveries: 3n });
    for (let i = 0; i < 2; i++) await endpoint(tenant, ['post.held']);
    const first = await events().publishEvent({ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' });
    expect(first.event?.deliveries).toHaveLength(2);
    expect(first.event?.deliveries.filter((d) => d.status === 'failed')).toEqual([]);
    const second = await events().publishEvent({ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' });
    const failed = second.event!.deliveries.filter((d) => d.status === 'failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.lastError).toBe('The monthly quota of 3 webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).');
    // The row stores what the answer says (the statement builds the text in SQL, the answer in TypeScript).
    const [stored] = await t.orm.em.fork().execute<{ status: string; last_error: string }[]>('select status, last_error from webhook_deliveries where id = ?', [failed[0]!.deliveryId]);
    expect(stored).toEqual({ status: 'failed', last_error: failed[0]!.lastError });
    const [usage] = await t.orm.em.fork().execute<{ deliveries: string }[]>('select deliveries from delivery_usage where organization_id = ?', [tenant.organizationId]);
    expect(Number(usage!.deliveries)).toBe(3);
    // The test route sees the same quota used up.
    const webhooks = (await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey })).body.endpoints;
    const test = await rest(t.url, 'POST', `/api/v1/webhooks/${webhooks[0].id}/test`, { apiKey: tenant.apiKey });
    expect(test.body.code).toBe('DELIVERY_QUOTA_EXCEEDED');
  });
  it.each([
    ['with the month counted so far', 15],
    ['in a month nothing was counted yet', null],
  ])('grants concurrent publishes %s exactly what the quota has left, never more', async (_, counted) => {
    const quota = 20;
    const left = counted === null ? quota : quota - counted;
    const publishes = Math.ceil(left / 3) + 6;
    const tenant = await enterpriseNearQuota(quota, counted, 3);
    const answers = await Promise.all(
      Array.from({ length: publishes }, () => events().publishEvent({ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' })),
    );
    const deliveries = answers.flatMap((a) => a.event!.deliveries);
    expect(deliveries).toHaveLength(publishes * 3);
    const sent = deliveries.filter((d) => d.status !== 'failed');
    expect(sent).toHaveLength(left);
    for (const d of deliveries.filter((d) => d.status === 'failed')) expect(d.lastError).toBe(`The monthly quota of ${quota} webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).`);
    expect(await countedOf(tenant)).toBe(quota);
    // The answers say what the rows say.
    const [rows] = await t.orm.em.fork().execute<{ n: string }[]>(`select count(*) as n from webhook_deliveries where organization_id = ? and status <> 'failed'`, [tenant.organizationId]);
    expect(Number(rows!.n)).toBe(left);
  });

  it('counts against a month whose count a concurrent publish is creating once that one committed, and no more than is left', async () => {
    const tenant = await enterpriseNearQuota(5, null, 3);
    const publisher = new EventPublisher({ deliveries: new DeliveryRecords(), engine: { start: async () => ({ workflowId: '' }) }, logger: t.app.logger, now: Date.now });
    let commitFirst!: () => void;
    const firstMayCommit = new Promise<void>((resolve) => (commitFirst = resolve));
    let firstRecorded!: (published: PublishedEvent[]) => void;
    const firstPublished = new Promise<PublishedEvent[]>((resolve) => (firstRecorded = resolve));
    // The first publish creates the month's count and counts 3 in a transaction held open.
    const first = t.orm.em.fork().transactional(async (tx) => {
      firstRecorded(await publisher.publishEvents(tx, [{ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' }], 'scheduler'));
      await firstMayCommit;
    });
    const [firstEvent] = await firstPublished;
    expect(firstEvent!.deliveries.map((d) => d.status)).toEqual(['pending', 'pending', 'pending']);
    const second = events().publishEvent({ organizationId: tenant.organizationId, eventId: newEventId(), eventType: 'post.held' });
    const waits = await within(10_000, async () => {
      const [row] = await t.orm.em.fork().execute<{ n: number }[]>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%delivery_usage%'`,
      );
      return row!.n > 0;
    });
    expect(waits).toBe(true);
    commitFirst();
    await first;
    expect((await second).event!.deliveries.map((d) => d.status)).toEqual(['pending', 'pending', 'failed']);
    expect(await countedOf(tenant)).toBe(5);
  });

  it('grants the events of a batch in order: the quota runs out within the batch, not before it', async () => {
    const tenant = await enterpriseNearQuota(10, 7, 2);
    const batch = [newEventId(), newEventId(), newEventId()].map((eventId) => ({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' }));
    const { events: published } = await events().publishEvents({ events: [...batch, batch[1]!] });
    const statuses = published.map((e) => e.deliveries.map((d) => (d.status === 'failed' ? 'failed' : 'sent')));
    expect(statuses).toEqual([['sent', 'sent'], ['sent', 'failed'], ['failed', 'failed'], ['sent', 'failed']]);
    // The batch's repeat of its second event is a republish: the same deliveries, nothing recorded twice.
    expect(published[3]!.replayed).toBe(true);
    expect(published[3]!.deliveries.map((d) => d.deliveryId)).toEqual(published[1]!.deliveries.map((d) => d.deliveryId));
    expect(await countedOf(tenant)).toBe(10);
  });
});

describe('the answer of a publish', () => {
  it('is the event and its deliveries as the statement stored them, field by field', async () => {
    const sending = await enterpriseNearQuota(2, 0, 3);
    const starter = await t.tenant({ plan: 'starter' });
    const publisher = new EventPublisher({ deliveries: new DeliveryRecords(), engine: { start: async () => ({ workflowId: '' }) }, logger: t.app.logger, now: Date.now });
    const batch = [
      { organizationId: sending.organizationId, eventId: newEventId(), eventType: 'post.held', payload: { postId: 'p_1' } },
      { organizationId: starter.organizationId, eventId: newEventId(), eventType: 'post.held' },
    ];
    // Read back in the publish's own transaction, before any engine can see (and change) the rows.
    await t.orm.em.fork().transactional(async (tx) => {
      const published = await publisher.publishEvents(tx, batch, 'scheduler');
      const stored = await Promise.all(batch.map((e) => publisher.find(tx, e.organizationId, e.eventId)));
      expect(published).toEqual(stored.map((found) => ({ ...found, replayed: false })));
      const [held, skipped] = published;
      expect(held!.deliveries.map((d) => d.status)).toEqual(['pending', 'pending', 'failed']);
      expect(held!.deliveries[2]!.lastError).toBe('The monthly quota of 2 webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).');
      expect(held!.deliveries.map((d) => d.workflowId)).toEqual(held!.deliveries.map((d) => workflowIdFor({ ...d, organizationId: sending.organizationId })));
      expect(skipped).toMatchObject({ skippedReason: 'PLAN_EXCLUDES_WEBHOOKS', deliveries: [] });
    });
  });
});

describe('the operator', () => {
  it('finds an event by organization and event id, with the status of every delivery', async () => {
    const tenant = await t.tenant();
    const first = await endpoint(tenant, ['post.held']);
    const second = await endpoint(tenant, ['post.held']);
    const eventId = newEventId();
    await client(EventService, t.url, 'grpc', SCHEDULER_TOKEN).publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' });
    const operator = client(OperatorService, t.url, 'connect', t.config.operatorToken);
    const found = await operator.getEvent({ organizationId: tenant.organizationId, eventId });
    expect(found.event).toMatchObject({ organizationId: tenant.organizationId, eventId, eventType: 'post.held', publisher: 'scheduler' });
    expect(found.deliveries.map((d) => d.endpointId).sort()).toEqual([first, second].sort());
    for (const d of found.deliveries) expect(['pending', 'retrying', 'delivered']).toContain(d.status);

    const other = await t.tenant();
    for (const lookup of [{ organizationId: other.organizationId, eventId }, { organizationId: tenant.organizationId, eventId: 'evt_missing' }, { organizationId: 'x', eventId }]) {
      expect(await failureOf(operator.getEvent(lookup))).toMatchObject({ code: Code.NotFound, reason: 'EVENT_NOT_FOUND' });
    }
  });
});

describe('outside /api/v1', () => {
  it('is served by no REST route', async () => {
    const tenant = await t.tenant();
    for (const credential of [SCHEDULER_TOKEN, tenant.apiKey]) {
      for (const path of [`/api/v1/${EventService.typeName}/PublishEvent`, '/api/v1/events', '/api/v1/events:publish', '/api/v1/internal/events']) {
        const response = await rest(t.url, 'POST', path, { apiKey: credential, body: { organizationId: tenant.organizationId, eventId: 'e1', eventType: 'post.held' } });
        expect({ path, status: response.status, code: response.body?.code }).toEqual({ path, status: 404, code: 'ROUTE_NOT_FOUND' });
      }
    }
  });

  it('is not in the OpenAPI document', async () => {
    const response = await rest(t.url, 'GET', '/api/v1/openapi.json');
    expect(response.status).toBe(200);
    const text = JSON.stringify(response.body);
    for (const word of ['EventService', 'PublishEvent', 'publishing.internal', 'PublishedEvent']) expect(text).not.toContain(word);
  });
});

describe('INTERNAL_SERVICE_TOKENS', () => {
  const production = {
    NODE_ENV: 'production',
    DATABASE_URL: 'postgres://db/x',
    STATE_SIGNING_KEY: 's'.repeat(32),
    OPERATOR_TOKEN: 'o'.repeat(32),
    SECRET_ENCRYPTION_KEYS: `k1:${Buffer.alloc(32, 1).toString('base64')}`,
    COMPOSIO_API_KEY: 'key',
  };
  const problemsOf = (env: Record<string, string>) => {
    try {
      loadConfig(env);
      return [];
    } catch (error) {
      return (error as { problems: string[] }).problems;
    }
  };

  it('has a development default in development and tests, and refuses it in production', () => {
    expect(loadConfig({ NODE_ENV: 'test' }).internalServiceTokens.map((e) => e.name)).toEqual(['development']);
    const devToken = loadConfig({ NODE_ENV: 'development' }).internalServiceTokens[0]!.token;
    expect(problemsOf(production).join('\n')).toMatch(/INTERNAL_SERVICE_TOKENS must be set in production/);
    expect(problemsOf({ ...production, INTERNAL_SERVICE_TOKENS: `development:${devToken}` }).join('\n')).toMatch(/development token/);
    expect(problemsOf({ ...production, INTERNAL_SERVICE_TOKENS: `scheduler:${SCHEDULER_TOKEN}` })).toEqual([]);
  });

  it('takes name:token pairs with tokens of at least 32 characters, each name and token once', () => {
    expect(loadConfig({ NODE_ENV: 'test', INTERNAL_SERVICE_TOKENS: ` scheduler:${SCHEDULER_TOKEN} , billing:${BILLING_TOKEN}` }).internalServiceTokens).toEqual([
      { name: 'scheduler', token: SCHEDULER_TOKEN },
      { name: 'billing', token: BILLING_TOKEN },
    ]);
    expect(problemsOf({ NODE_ENV: 'test', INTERNAL_SERVICE_TOKENS: 'scheduler:short' }).join()).toMatch(/at least 32 characters/);
    expect(problemsOf({ NODE_ENV: 'test', INTERNAL_SERVICE_TOKENS: SCHEDULER_TOKEN }).join()).toMatch(/"<name>:<token>"/);
    expect(problemsOf({ NODE_ENV: 'test', INTERNAL_SERVICE_TOKENS: `a:${SCHEDULER_TOKEN},a:${BILLING_TOKEN}` }).join()).toMatch(/names a twice/);
    expect(problemsOf({ NODE_ENV: 'test', INTERNAL_SERVICE_TOKENS: `a:${SCHEDULER_TOKEN},b:${SCHEDULER_TOKEN}` }).join()).toMatch(/same token/);
    expect(problemsOf({ NODE_ENV: 'test', OPERATOR_TOKEN: SCHEDULER_TOKEN, INTERNAL_SERVICE_TOKENS: `a:${SCHEDULER_TOKEN}` }).join()).toMatch(/operator token/);
  });
});
