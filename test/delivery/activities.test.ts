import { createHmac, randomUUID } from 'node:crypto';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import { openDatabase, WebhookEndpointSchema, type MikroORM, databaseAt } from '../../src/db';
import { createOrganization } from '../../src/auth';
import { createActivities, DeliveryRecords, workflowIdFor, type DeliveryRef } from '../../src/delivery';
import { createOutboundClient } from '../../src/outbound';
import { SecretBox, newSigningSecret } from '../../src/secrets';
import { createLogger } from '../../src/config/logger';
import { MAX_ATTEMPTS, RETRY_INTERVAL_MS } from '../../workflows/policy';
import { createTestDatabase } from '../support/databases';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';

/** The activities as the Temporal worker runs them, in Temporal's mock activity context. */
let orm: MikroORM;
let drop: () => Promise<void>;
let receiver: HttpsReceiver;
let organizationId: string;
let next: ReceiverAction = { status: 200 };
let tls: Awaited<ReturnType<typeof makeTestTls>>;
const secrets = new SecretBox(new Map([['k', Buffer.alloc(32, 7)]]), 'k');
const NOW = Date.parse('2026-11-21T12:00:00Z');
const records = new DeliveryRecords({ now: () => NOW });

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 4 } });
  tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls, respond: () => next });
  organizationId = (await createOrganization(orm.em.fork(), { name: 'Activities', plan: 'scale' })).id;
  activities = createActivities({
    orm,
    records,
    secrets,
    outbound: createOutboundClient({ allowCidrs: ['127.0.0.0/8'], extraCa: tls.caPem, timeoutMs: 2000, maxResponseBytes: 1024 }),
    logger: createLogger('silent'),
    now: () => NOW,
  });
});
afterAll(async () => {
  await receiver.close();
  await orm.close();
  await drop();
});

let activities: ReturnType<typeof createActivities>;

async function delivery(options: { disabled?: boolean; attemptCount?: number } = {}): Promise<{ ref: DeliveryRef; secret: string }> {
  const em = orm.em.fork();
  const id = randomUUID();
  const secret = newSigningSecret();
  const sealed = secrets.seal(secret, id);
  em.create(WebhookEndpointSchema, {
    id,
    organizationId,
    url: `${receiver.url}/hook`,
    description: '',
    eventNames: ['webhook.test'],
    secretKeyId: sealed.keyId,
    secretCiphertext: sealed.ciphertext,
    disabledAt: options.disabled ? new Date(NOW) : null,
  });
  await em.flush();
  const eventId = `evt_${randomUUID()}`;
  const ref = { organizationId, endpointId: id, eventId };
  const [row] = await em.execute<{ id: string }[]>(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at, workflow_id, created_at, updated_at)
     values (gen_random_uuid(), ?, ?, ?, 'webhook.test', ?, 'pending', ?, ?, ?, now(), now()) returning id`,
    [organizationId, id, eventId, JSON.stringify({ id: eventId, type: 'webhook.test' }), options.attemptCount ?? 0, new Date(NOW), workflowIdFor(ref)],
  );
  return { ref: { deliveryId: row!.id, ...ref }, secret };
}

async function rowOf(ref: DeliveryRef) {
  const [row] = await orm.em.fork().execute<{ status: string; attempt_count: number; next_attempt_at: Date | string | null; last_error: string | null }[]>(
    'select status, attempt_count, next_attempt_at, last_error from webhook_deliveries where id = ?',
    [ref.deliveryId],
  );
  return row!;
}

async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApplicationFailure);
  return error as ApplicationFailure;
}

describe('attemptDelivery', () => {
  const env = new MockActivityEnvironment();

  it('signs and sends the stored payload, and records the delivery', async () => {
    next = { status: 204 };
    const { ref, secret } = await delivery();
    const before = receiver.requests.length;
    await expect(env.run(activities.attemptDelivery, ref)).resolves.toEqual({ kind: 'delivered', attempt: 1, status: 204 });
    const request = receiver.requests[before]!;
    const ts = request.headers['x-service-timestamp'] as string;
    expect(ts).toBe(String(Math.floor(NOW / 1000)));
    expect(request.headers['x-service-signature']).toBe(createHmac('sha256', secret).update(`${ts}.${request.rawBody}`).digest('hex'));
    expect(await rowOf(ref)).toMatchObject({ status: 'delivered', attempt_count: 1, last_error: null });
  });

  it('fails retryably on a non-2xx answer and schedules the next attempt 30 seconds later', async () => {
    next = { status: 500 };
    const { ref } = await delivery();
    const failure = await failureOf(env.run(activities.attemptDelivery, ref));
    expect(failure.type).toBe('DeliveryAttemptFailed');
    expect(failure.nonRetryable).toBe(false);
    const row = await rowOf(ref);
    expect(row).toMatchObject({ status: 'retrying', attempt_count: 1, last_error: 'The endpoint answered HTTP 500.' });
    expect(new Date(row.next_attempt_at!).getTime()).toBe(NOW + RETRY_INTERVAL_MS);
    expect(RETRY_INTERVAL_MS).toBe(30_000);
  });

  it('fails for good, with the reason on the row, when the endpoint is disabled', async () => {
    const { ref } = await delivery({ disabled: true });
    const before = receiver.requests.length;
    const failure = await failureOf(env.run(activities.attemptDelivery, ref));
    expect({ type: failure.type, nonRetryable: failure.nonRetryable }).toEqual({ type: 'EndpointGone', nonRetryable: true });
    expect(await rowOf(ref)).toMatchObject({ status: 'failed', last_error: 'The endpoint is disabled.', next_attempt_at: null });
    expect(receiver.requests.length).toBe(before);
  });

  it('holds without sending or using an attempt while the kill switch is on', async () => {
    next = { status: 200 };
    const { ref } = await delivery();
    const before = receiver.requests.length;
    await records.writeKillSwitch(orm.em.fork(), organizationId, true, 'drill');
    try {
      await expect(env.run(activities.attemptDelivery, ref)).resolves.toEqual({ kind: 'held', sent: 0 });
      expect(await rowOf(ref)).toMatchObject({ status: 'held', attempt_count: 0 });
      expect(receiver.requests.length).toBe(before);
    } finally {
      await records.writeKillSwitch(orm.em.fork(), organizationId, false, '');
    }
    await expect(env.run(activities.attemptDelivery, ref)).resolves.toEqual({ kind: 'delivered', attempt: 1, status: 200 });
  });

  it('dead-letters a delivery whose outcome a failure of ours kept from being recorded after the send, saying it was sent', async () => {
    next = { status: 200 };
    const { ref } = await delivery();
    const before = receiver.requests.length;
    // A failure of ours no retry fixes, once the request is out (what a named prepared
    // statement taken on a shared session did: 42P05).
    class OutcomeRefused extends DeliveryRecords {
      override async recordOutcomes(): Promise<never> {
        throw Object.assign(new Error('prepared statement "prepared_3" already exists'), { code: '42P05' });
      }
    }
    const failing = createActivities({
      orm,
      records: new OutcomeRefused({ now: () => NOW }),
      secrets,
      outbound: createOutboundClient({ allowCidrs: ['127.0.0.0/8'], extraCa: tls.caPem, timeoutMs: 2000, maxResponseBytes: 1024 }),
      logger: createLogger('silent'),
      now: () => NOW,
    });
    const failure = await failureOf(env.run(failing.attemptDelivery, ref));
    expect({ type: failure.type, nonRetryable: failure.nonRetryable }).toEqual({ type: 'DeliveryAbandoned', nonRetryable: true });
    expect(receiver.requests.length).toBe(before + 1);
    const row = await rowOf(ref);
    expect(row).toMatchObject({ status: 'dead_lettered', attempt_count: 1 });
    expect(row.last_error).toMatch(/^Sent, then failed on our side before its outcome was recorded \(prepared statement "prepared_3" already exists\); the receiver may have it/);
    expect(row.last_error).not.toMatch(/not sent|no attempt/i);
  });

  it(`refuses a ninth attempt once all ${MAX_ATTEMPTS} are used`, async () => {
    const { ref } = await delivery({ attemptCount: MAX_ATTEMPTS });
    const failure = await failureOf(env.run(activities.attemptDelivery, ref));
    expect({ type: failure.type, nonRetryable: failure.nonRetryable }).toEqual({ type: 'AttemptsExhausted', nonRetryable: true });
  });
});

describe('deadLetter', () => {
  it('marks the delivery dead-lettered and queues it once', async () => {
    next = { status: 500 };
    const { ref } = await delivery();
    // Its own workflow's activity: a delivery whose row names another workflow is not this one's to end.
    const env = new MockActivityEnvironment({ workflowExecution: { workflowId: workflowIdFor(ref), runId: randomUUID() } });
    await failureOf(env.run(activities.attemptDelivery, ref));
    await env.run(activities.deadLetter, ref);
    await env.run(activities.deadLetter, ref);
    expect(await rowOf(ref)).toMatchObject({ status: 'dead_lettered', next_attempt_at: null });
    const letters = await orm.em.fork().execute<{ last_error: string }[]>('select last_error from dead_letters where delivery_id = ?', [ref.deliveryId]);
    expect(letters).toEqual([{ last_error: 'The endpoint answered HTTP 500.' }]);
  });

  it("leaves the delivery alone when the row names another workflow (a resend's series begun since)", async () => {
    next = { status: 500 };
    const { ref } = await delivery();
    const env = new MockActivityEnvironment({ workflowExecution: { workflowId: `${workflowIdFor(ref)}/series-0`, runId: randomUUID() } });
    await env.run(activities.deadLetter, ref);
    expect(await rowOf(ref)).toMatchObject({ status: 'pending' });
  });
});
