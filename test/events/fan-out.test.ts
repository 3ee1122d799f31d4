import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { Client as TemporalClient, WorkflowStartOptions } from '@temporalio/client';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { verifyWebhook } from '../../src/signatures';
import { SecretBox } from '../../src/secrets';
import { createOrganization } from '../../src/auth';
import { openDatabase, type EntityManager, type MikroORM, databaseAt } from '../../src/db';
import { createLogger } from '../../src/config/logger';
import { EventPublisher, type PublishedEvent } from '../../src/events';
import {
  DeliveryRecords,
  EmbeddedDeliveryEngine,
  TemporalDeliveryEngine,
  workflowIdFor,
  type DeliveryAttempts,
  type DeliveryRef,
} from '../../src/delivery';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { within } from '../support/within';
import { subscribedEndpoints } from '../support/deliveries';

const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
/** How many endpoints one publish fans out to: the contract's constant-statement promise is about this many. */
const SUBSCRIBERS = 1000;
/** How many of them the engine delivers end to end to the real receiver: the path is the same for each. */
const DELIVERED_END_TO_END = 50;

/** Every statement each pooled connection sends, in order. */
const sent = new Map<PoolClient, { text: string; values: unknown[] }[]>();
function watch(pool: Pool): void {
  pool.on('connect', (connection) => {
    const log: { text: string; values: unknown[] }[] = [];
    sent.set(connection, log);
    const query = connection.query.bind(connection) as (...args: unknown[]) => unknown;
    (connection as { query: unknown }).query = (...args: unknown[]) => {
      const [text, values] = args;
      if (typeof text === 'string') log.push({ text, values: Array.isArray(values) ? values : [] });
      return query(...args);
    };
  });
}

/** The statements sent on any pooled connection while `fn` ran (nothing else uses the pool meanwhile). */
async function statementsDuring<T>(fn: () => Promise<T>): Promise<{ result: T; statements: string[] }> {
  const before = new Map([...sent].map(([connection, log]) => [connection, log.length]));
  const result = await fn();
  return { result, statements: [...sent].flatMap(([connection, log]) => log.slice(before.get(connection) ?? 0).map((s) => s.text)) };
}

let t: TestApp;
let receiver: HttpsReceiver;
let tenant: Tenant;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls });
  t = await startTestApp({
    INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`,
    DELIVERY_EXTRA_CA_PEM: tls.caPem,
    DELIVERY_POLL_INTERVAL_MS: '50',
    DELIVERY_CONCURRENCY: '32',
    // The receiver shares this process with the service: on a busy machine an answer can
    // miss its deadline, and the retry it causes is at-least-once delivery, not a failure.
    DELIVERY_TEST_RETRY_INTERVAL_MS: '200',
  });
  tenant = await t.tenant({ plan: 'command' });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

/** Subscribers at the receiver, each at its own path, sealed as the app seals them. */
function subscribe(em: EntityManager, organizationId: string, count: number, eventNames: string[]): Promise<Map<string, string>> {
  return subscribedEndpoints(em, new SecretBox(t.config.secretKeys, t.config.currentSecretKeyId), organizationId, { urlPrefix: `${receiver.url}/fan-out/`, count, eventNames });
}

it('arrives at a real HTTPS receiver signed, with the documented body', async () => {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/one`, eventNames: ['connection.verified'] } });
  const secret = created.body.signingSecret as string;
  const eventId = `evt_${randomUUID()}`;
  const occurredAt = new Date('2026-11-24T09:30:00.000Z');
  const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent({
    organizationId: tenant.organizationId,
    eventId,
    eventType: 'connection.verified',
    payload: { connectionId: 'c_1', toolkit: 'instagram', nested: { list: [1, 'two', null, true] } },
    occurredAt: { seconds: BigInt(occurredAt.getTime() / 1000), nanos: 0 },
  });
  expect(event?.deliveries).toHaveLength(1);

  const [request] = await receiver.waitForRequests(1, 10_000);
  expect(request!.path).toBe('/one');
  expect(() => verifyWebhook(secret, request!.headers, request!.rawBody)).not.toThrow();
  expect(JSON.parse(request!.rawBody)).toEqual({
    id: eventId,
    type: 'connection.verified',
    createdAt: '2026-11-24T09:30:00.000Z',
    data: { connectionId: 'c_1', toolkit: 'instagram', nested: { list: [1, 'two', null, true] } },
  });
  expect(Object.keys(JSON.parse(request!.rawBody))).toEqual(['id', 'type', 'createdAt', 'data']);
});

it(`delivers a fan-out to each of ${DELIVERED_END_TO_END} endpoints, signed with that endpoint's own secret`, async () => {
  const secrets = await subscribe(t.orm.em.fork(), tenant.organizationId, DELIVERED_END_TO_END, ['post.held']);
  const before = receiver.requests.length;
  const eventId = `evt_${randomUUID()}`;
  const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held', payload: { n: 1 } });
  expect(event?.deliveries).toHaveLength(DELIVERED_END_TO_END);

  const allDelivered = await within(150_000, async () => {
    const [row] = await t.orm.em.fork().execute<{ n: string }[]>(`select count(*) as n from webhook_deliveries where event_id = ? and status = 'delivered'`, [eventId]);
    return Number(row!.n) === DELIVERED_END_TO_END;
  });
  expect(allDelivered).toBe(true);
  // A retried attempt may have sent an event twice; each copy verifies with its endpoint's secret.
  const held = receiver.requests.slice(before).filter((r) => JSON.parse(r.rawBody).id === eventId);
  const reached = new Set<string>();
  for (const request of held) {
    const endpointId = request.path.slice('/fan-out/'.length);
    expect(() => verifyWebhook(secrets.get(endpointId) ?? '', request.headers, request.rawBody)).not.toThrow();
    reached.add(endpointId);
  }
  expect([...reached].sort()).toEqual([...secrets.keys()].sort());
}, 180_000);

/**
 * The 1,000-endpoint publish, on a database of its own where no engine runs: what the
 * Temporal engine starts and what the embedded engine claims are then this publish's
 * deliveries alone, observed without sending 1,000 requests (the test above sends some).
 */
describe(`one publish to ${SUBSCRIBERS} subscribed endpoints`, () => {
  let database: TestDatabase;
  let orm: MikroORM;
  let organizationId: string;
  const logger = createLogger('silent');
  /** What a Temporal server would have been asked to start. */
  const workflowStarts: { workflowType: string; options: WorkflowStartOptions }[] = [];
  const temporalClient = {
    connection: { withDeadline: <R>(_deadline: number, fn: () => Promise<R>) => fn() },
    workflow: {
      async start(workflowType: string, options: WorkflowStartOptions) {
        workflowStarts.push({ workflowType, options });
        return { workflowId: options.workflowId };
      },
    },
  } as unknown as TemporalClient;
  const publisher = new EventPublisher({
    deliveries: new DeliveryRecords(),
    engine: new TemporalDeliveryEngine({ client: temporalClient, taskQueue: 'webhook-deliveries' }),
    logger,
    now: Date.now,
  });
  let first: { event: PublishedEvent; statements: string[] };
  let one: { event: PublishedEvent; statements: string[] };
  let many: { event: PublishedEvent; statements: string[] };

  const publish = async (eventType: string) => {
    const eventId = `evt_${randomUUID()}`;
    const { result, statements } = await statementsDuring(() =>
      publisher.publish(orm.em.fork(), [{ organizationId, eventId, eventType, payload: { n: 1 } }], 'scheduler'),
    );
    return { event: result[0]!, statements };
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    orm = await openDatabase(databaseAt(database.url), { driverOptions: { onPoolCreated: watch } });
    const em = orm.em.fork();
    organizationId = (await createOrganization(em, { name: 'Fan-out', plan: 'command' })).id;
    await subscribe(em, organizationId, 1, ['post.released']);
    await subscribe(em, organizationId, SUBSCRIBERS, ['post.held']);
    // The month's first publish also creates its count (one statement more, once a month); the two measured come after it.
    first = await publish('post.released');
    one = await publish('post.released');
    many = await publish('post.held');
  });
  afterAll(async () => {
    await orm?.close();
    await database?.drop();
  });

  it('records its deliveries in one statement, as a publish to one endpoint does', () => {
    expect(one.event.deliveries).toHaveLength(1);
    expect(many.event.deliveries).toHaveLength(SUBSCRIBERS);
    for (const { statements } of [one, many]) {
      // The event, the quota's count and every delivery: one statement, which commits on its own.
      expect(statements).toHaveLength(1);
      expect(statements[0]).toMatch(/insert into "events"[\s\S]*update "delivery_usage"[\s\S]*insert into "webhook_deliveries"/);
    }
    // The month's first publish: the same statement, which wrote nothing for want of the month's count, the count, the statement again.
    expect(first.event.deliveries).toHaveLength(1);
    expect(first.statements).toHaveLength(3);
    expect(first.statements[1]).toMatch(/^insert into delivery_usage/);
    expect(first.statements[2]).toBe(first.statements[0]);
  });

  it('starts a Temporal workflow for each delivery', () => {
    const refOf = (deliveryId: string, endpointId: string): DeliveryRef => ({ deliveryId, organizationId, endpointId, eventId: many.event.eventId });
    const forMany = new Map(
      workflowStarts.filter((s) => (s.options.args as DeliveryRef[])[0]!.eventId === many.event.eventId).map((s) => [s.options.workflowId, s]),
    );
    expect(forMany.size).toBe(SUBSCRIBERS);
    for (const delivery of many.event.deliveries) {
      const ref = refOf(delivery.id, delivery.endpointId);
      expect(delivery.workflowId).toBe(workflowIdFor(ref));
      const start = forMany.get(delivery.workflowId);
      expect(start).toEqual({ workflowType: 'deliverWebhook', options: expect.objectContaining({ workflowId: delivery.workflowId, taskQueue: 'webhook-deliveries', args: [ref] }) });
    }
  });

  it('has each delivery claimed by the embedded engine', async () => {
    const ran: DeliveryRef[] = [];
    // The attempts themselves are the ones the end-to-end test above makes; here only what the engine takes counts.
    const attempts = {
      records: new DeliveryRecords(),
      run: async (ref: DeliveryRef) => {
        ran.push(ref);
        return { kind: 'held', sent: 0 };
      },
      deadLetter: async () => undefined,
    } as unknown as DeliveryAttempts;
    const engine = new EmbeddedDeliveryEngine({ orm, attempts, logger, pollIntervalMs: 60_000, concurrency: 256 });
    engine.begin();
    await engine.idle();
    await engine.close();
    const claimed = ran.filter((ref) => ref.eventId === many.event.eventId);
    expect(claimed).toHaveLength(SUBSCRIBERS);
    expect(claimed.map((ref) => ref.deliveryId).sort()).toEqual(many.event.deliveries.map((d) => d.id).sort());
    expect(new Set(ran.map((ref) => ref.deliveryId)).size).toBe(ran.length);
  });
});
