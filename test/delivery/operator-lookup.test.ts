import { Code, ConnectError } from '@connectrpc/connect';
import { timestampMs } from '@bufbuild/protobuf/wkt';
import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { untilStored } from '../support/deliveries';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { errorInfoOf } from '../../src/errors';
import { MAX_ATTEMPTS } from '../../workflows/policy';

/**
 * OperatorService.GetDelivery over gRPC: what happened to a delivery and why, in one call,
 * for a delivery that was retried and delivered, one dead-lettered and one that failed on a
 * disabled endpoint.
 */
let tls: TestTls;
let t: TestApp;
let tenant: Tenant;
const receivers: HttpsReceiver[] = [];
const operator = () => client(OperatorService, t.url, 'grpc', t.config.operatorToken);

beforeAll(async () => {
  tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '100' });
  tenant = await t.tenant();
});
afterAll(async () => {
  await t?.close();
  for (const r of receivers) await r.close();
});

async function endpointFor(respond: (index: number) => ReceiverAction): Promise<{ id: string; receiver: HttpsReceiver }> {
  const receiver = await startHttpsReceiver({ tls, respond });
  receivers.push(receiver);
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  return { id: created.body.endpoint.id, receiver };
}

async function sendTest(endpointId: string): Promise<{ id: string; eventId: string }> {
  const test = await rest(t.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  return { id: test.body.delivery.id, eventId: test.body.delivery.eventId };
}

async function refusal(request: { deliveryId?: string; endpointId?: string; eventId?: string }): Promise<{ code: Code; reason: string | undefined }> {
  const error = await operator()
    .getDelivery(request)
    .then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
  if (!error) throw new Error(`GetDelivery ${JSON.stringify(request)} answered`);
  return { code: error.code, reason: errorInfoOf(error)?.code };
}

it('shows a delivery retried then delivered, with every attempt, by id and by endpoint and event', async () => {
  const { id: endpointId, receiver } = await endpointFor((i) => (i < 2 ? { status: 503 } : { status: 200 }));
  const { id, eventId } = await sendTest(endpointId);
  await untilStored(t.orm, id, (row) => row.status === 'delivered');
  await t.app.delivery.embedded!.idle();

  const { delivery } = await operator().getDelivery({ deliveryId: id });
  expect(delivery).toMatchObject({
    deliveryId: id,
    organizationId: tenant.organizationId,
    endpointId,
    eventId,
    eventType: 'webhook.test',
    status: 'delivered',
    attemptCount: 3,
    lastError: '',
    deadLettered: false,
    workflowId: `webhook-delivery/${tenant.organizationId}/${endpointId}/${eventId}`,
  });
  expect(delivery!.deliveredAt).toBeDefined();
  expect(delivery!.attempts.map((a) => [a.attempt, a.httpStatus, a.error])).toEqual([
    [1, 503, 'The endpoint answered HTTP 503.'],
    [2, 503, 'The endpoint answered HTTP 503.'],
    [3, 200, ''],
  ]);
  for (const attempt of delivery!.attempts) {
    expect(attempt.dispatchedAt).toBeDefined();
    expect(attempt.finishedAt).toBeDefined();
    expect(Number(attempt.durationMs)).toBe(timestampMs(attempt.finishedAt!) - timestampMs(attempt.startedAt!));
    expect(Number(attempt.durationMs)).toBeGreaterThanOrEqual(0);
  }
  expect(receiver.requests).toHaveLength(delivery!.attempts.length);

  expect((await operator().getDelivery({ endpointId, eventId })).delivery).toEqual(delivery);
});

it('shows a dead-lettered delivery with its 8 attempts', async () => {
  const { id: endpointId, receiver } = await endpointFor(() => ({ status: 500 }));
  const { id, eventId } = await sendTest(endpointId);
  await untilStored(t.orm, id, (row) => row.status === 'dead_lettered');
  await t.app.delivery.embedded!.idle();

  const { delivery } = await operator().getDelivery({ endpointId, eventId });
  expect(delivery).toMatchObject({ deliveryId: id, status: 'dead_lettered', attemptCount: MAX_ATTEMPTS, deadLettered: true, lastError: 'The endpoint answered HTTP 500.' });
  expect(delivery!.deadLetteredAt).toBeDefined();
  expect(delivery!.nextAttemptAt).toBeUndefined();
  expect(delivery!.attempts.map((a) => [a.attempt, a.httpStatus])).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((n) => [n, 500]));
  expect(receiver.requests).toHaveLength(MAX_ATTEMPTS);
}, 30_000);

it('shows a delivery that failed on a disabled endpoint: its reason and no attempt', async () => {
  const { id: endpointId, receiver } = await endpointFor(() => ({ status: 200 }));
  // Held first, so the endpoint is disabled before the delivery's one chance to be sent.
  await operator().setKillSwitch({ organizationId: tenant.organizationId, enabled: true, reason: 'lookup drill' });
  let id: string;
  try {
    ({ id } = await sendTest(endpointId));
    await untilStored(t.orm, id, (row) => row.status === 'held');
    expect((await rest(t.url, 'DELETE', `/api/v1/webhooks/${endpointId}`, { apiKey: tenant.apiKey })).status).toBe(200);
  } finally {
    await operator().setKillSwitch({ organizationId: tenant.organizationId, enabled: false, reason: '' });
  }
  await untilStored(t.orm, id, (row) => row.status === 'failed');
  await t.app.delivery.embedded!.idle();

  const { delivery } = await operator().getDelivery({ deliveryId: id });
  expect(delivery).toMatchObject({ deliveryId: id, status: 'failed', lastError: 'The endpoint is disabled.', attemptCount: 0, deadLettered: false, attempts: [] });
  expect(receiver.requests).toHaveLength(0);
});

it('answers DELIVERY_NOT_FOUND for a delivery that does not exist', async () => {
  const { id: endpointId } = await endpointFor(() => ({ status: 200 }));
  const notFound = { code: Code.NotFound, reason: 'DELIVERY_NOT_FOUND' };
  expect(await refusal({ deliveryId: randomUUID() })).toEqual(notFound);
  expect(await refusal({ deliveryId: 'not-a-uuid' })).toEqual(notFound);
  expect(await refusal({ endpointId, eventId: 'evt_never_sent' })).toEqual(notFound);
  expect(await refusal({ endpointId: randomUUID(), eventId: 'evt_x' })).toEqual(notFound);
});

it('answers DELIVERY_LOOKUP_INVALID unless given a delivery id, or an endpoint id with an event id', async () => {
  const invalid = { code: Code.InvalidArgument, reason: 'DELIVERY_LOOKUP_INVALID' };
  expect(await refusal({})).toEqual(invalid);
  expect(await refusal({ endpointId: randomUUID() })).toEqual(invalid);
  expect(await refusal({ eventId: 'evt_x' })).toEqual(invalid);
  expect(await refusal({ deliveryId: randomUUID(), endpointId: randomUUID(), eventId: 'evt_x' })).toEqual(invalid);
});

it('refuses a recovery window or a filter bound no date can hold with a code, and audits a dry run', async () => {
  const { id: endpointId } = await endpointFor(() => ({ status: 200 }));
  const refusedWith = (call: Promise<unknown>) =>
    call.then(
      () => null,
      (e: unknown) => {
        const error = ConnectError.from(e);
        return { code: error.code, reason: errorInfoOf(error)?.code };
      },
    );
  const farFuture = { seconds: 10n ** 15n, nanos: 0 };
  const beforeYearOne = { seconds: -300_000_000_000n, nanos: 0 };
  const window = { code: Code.InvalidArgument, reason: 'RECOVERY_WINDOW_INVALID' };
  expect(await refusedWith(operator().recoverDeliveries({ endpointId, since: farFuture }))).toEqual(window);
  expect(await refusedWith(operator().recoverDeliveries({ endpointId, since: beforeYearOne, until: { seconds: beforeYearOne.seconds + 3600n, nanos: 0 } }))).toEqual(window);
  const filter = { code: Code.InvalidArgument, reason: 'INVALID_ARGUMENT' };
  expect(await refusedWith(operator().listDeadLetters({ since: farFuture }))).toEqual(filter);
  expect(await refusedWith(operator().queryAuditEvents({ until: beforeYearOne }))).toEqual(filter);
  expect(await t.orm.em.fork().execute('select 1 from recovery_jobs where endpoint_id = ?', [endpointId])).toEqual([]);

  const since = { seconds: BigInt(Math.floor(Date.now() / 1000) - 3600), nanos: 0 };
  expect(await operator().recoverDeliveries({ endpointId, since, dryRun: true })).toMatchObject({ dryRun: true, found: 0 });
  expect(await t.orm.em.fork().execute('select outcome, target_id from audit_events where action = ? and target_id = ?', ['operator.webhook.recover', endpointId])).toEqual([
    { outcome: 'succeeded', target_id: endpointId },
  ]);
});
