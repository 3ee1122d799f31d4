import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import type { Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { signedWith, storedAttempts, storedDeadLetters, storedDelivery, untilStored } from '../support/deliveries';
import { recordHistory } from './recorded-histories';

/**
 * The README's delivery promises, one table of cases run on each engine: the embedded engine
 * in the API process, and Temporal (a workflow per delivery on the run's development server,
 * run by a worker with the production workflow bundle and activities). The interval is
 * shortened by the test configuration on both, the same way; the contract's real 30 s is
 * checked in contract-timing.*.test.ts.
 *
 * Nothing here sleeps and then counts: each case waits for the row it expects, then for the
 * engine to be idle, and only then compares what arrived with what was recorded.
 */
const INTERVAL_MS = 4_000;

let tls: TestTls;
beforeAll(async () => {
  tls = await makeTestTls();
});

describe.each(ENGINES)('on the %s engine', (engine) => {
  let t: EngineApp;
  const receivers: HttpsReceiver[] = [];

  beforeAll(async () => {
    // The embedded engine picks due retries up at its poll: 2.5 s keeps the cases short, and is
    // still longer than the 2 s within which a released delivery must go out.
    t = await startEngineApp(engine, { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '2500', DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS) });
  }, 60_000);
  afterAll(async () => {
    for (const r of receivers) await r.close();
    await t?.close();
  });

  async function receiver(respond: (index: number) => ReceiverAction): Promise<HttpsReceiver> {
    const r = await startHttpsReceiver({ tls, respond });
    receivers.push(r);
    return r;
  }

  async function endpointAt(tenant: Tenant, url: string): Promise<{ id: string; secret: string }> {
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url, eventNames: ['webhook.test'] } });
    expect(created.status).toBe(200);
    return { id: created.body.endpoint.id, secret: created.body.signingSecret };
  }

  async function sendTest(tenant: Tenant, endpointId: string): Promise<{ id: string; workflowId: string }> {
    const test = await rest(t.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
    expect(test.status).toBe(200);
    return { id: test.body.delivery.id as string, workflowId: test.body.delivery.workflowId as string };
  }

  /** Arrivals equal the attempts recorded as sent, numbered 1..n in rows and receiver alike, every one signed, at most one success. */
  async function expectArrivalsMatchAttempts(id: string, r: HttpsReceiver, secret: string): Promise<number> {
    const attempts = await storedAttempts(t.orm, id);
    const row = await storedDelivery(t.orm, id);
    expect(attempts.every((a) => a.dispatched_at !== null)).toBe(true);
    expect(r.requests).toHaveLength(attempts.length);
    expect(row.attempt_count).toBe(attempts.length);
    expect(attempts.map((a) => a.attempt)).toEqual(attempts.map((_, i) => i + 1));
    expect(r.requests.map((q) => q.answered)).toEqual(attempts.map((a) => a.response_status));
    for (const request of r.requests) expect(signedWith(request, secret)).toBe(true);
    const successes = attempts.filter((a) => a.response_status !== null && a.response_status >= 200 && a.response_status < 300);
    expect(successes).toHaveLength(row.status === 'delivered' ? 1 : 0);
    return attempts.length;
  }

  /** Temporal's own view of a finished delivery: the workflow's result, and the attempt number of its last attempt activity. */
  async function temporalView(workflowId: string, recordAs: string): Promise<{ result: unknown; lastActivityAttempt: number | undefined }> {
    const handle = t.temporal!.client.workflow.getHandle(workflowId);
    await recordHistory(handle, recordAs);
    const result = await handle.result();
    const history = await handle.fetchHistory();
    const started = (history.events ?? []).filter((e) => e.activityTaskStartedEventAttributes);
    const scheduled = (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'attemptDelivery').map((e) => e.eventId?.toString());
    const attemptStarts = started.filter((e) => scheduled.includes(e.activityTaskStartedEventAttributes!.scheduledEventId?.toString()));
    return { result, lastActivityAttempt: attemptStarts.at(-1)?.activityTaskStartedEventAttributes?.attempt ?? undefined };
  }

  it('fails twice then succeeds: arrivals equal attempts sent, one success, the same attempt numbers everywhere', async () => {
    const tenant = await t.tenant();
    const r = await receiver((i) => (i < 2 ? { status: 503 } : { status: 204 }));
    const endpoint = await endpointAt(tenant, `${r.url}/flaky`);
    const { id, workflowId } = await sendTest(tenant, endpoint.id);

    await untilStored(t.orm, id, (row) => row.status === 'delivered', 60_000);
    await t.idle();
    expect(await expectArrivalsMatchAttempts(id, r, endpoint.secret)).toBe(3);
    expect(r.requests.map((q) => q.answered)).toEqual([503, 503, 204]);
    expect(new Set(r.requests.map((q) => JSON.parse(q.rawBody).id)).size).toBe(1);
    const [first, second, third] = r.requests;
    expect(second!.receivedAt - first!.receivedAt).toBeGreaterThanOrEqual(INTERVAL_MS - 250);
    expect(third!.receivedAt - second!.receivedAt).toBeGreaterThanOrEqual(INTERVAL_MS - 250);
    if (engine === 'temporal') {
      expect(await temporalView(workflowId, 'delivered-after-two-failures')).toEqual({ result: { status: 'delivered', attempts: 3 }, lastActivityAttempt: 3 });
    }
  }, 90_000);

  it("429 and 503 answers: each attempt's Retry-After in the delivery log, the next attempt still one interval later", async () => {
    const tenant = await t.tenant();
    const inAnHour = new Date(Date.now() + 3_600_000).toUTCString();
    const answers: ReceiverAction[] = [
      { status: 429, headers: { 'retry-after': '120' } },
      { status: 503, headers: { 'retry-after': inAnHour } },
      { status: 503, headers: { 'retry-after': 'soon' } },
      { status: 200 },
    ];
    const r = await receiver((i) => answers[i] ?? { status: 200 });
    const endpoint = await endpointAt(tenant, `${r.url}/busy`);
    const { id } = await sendTest(tenant, endpoint.id);

    await untilStored(t.orm, id, (row) => row.status === 'delivered', 60_000);
    await t.idle();
    expect(await expectArrivalsMatchAttempts(id, r, endpoint.secret)).toBe(4);
    for (let i = 1; i < 4; i++) expect(r.requests[i]!.receivedAt - r.requests[i - 1]!.receivedAt).toBeGreaterThanOrEqual(INTERVAL_MS - 250);
    const log = await rest(t.url, 'GET', `/api/v1/webhooks/${endpoint.id}/deliveries/${id}`, { apiKey: tenant.apiKey });
    expect(log.status).toBe(200);
    const attempts: { responseStatus: number; retryAfterSeconds?: number }[] = log.body.attempts;
    expect(attempts.map((a) => a.responseStatus)).toEqual([429, 503, 503, 200]);
    expect(attempts[0]!.retryAfterSeconds).toBe(120);
    expect(attempts[1]!.retryAfterSeconds).toBeGreaterThan(3_500);
    expect(attempts[1]!.retryAfterSeconds).toBeLessThanOrEqual(3_600);
    expect(attempts[2]!.retryAfterSeconds).toBeUndefined();
    expect(attempts[3]!.retryAfterSeconds).toBeUndefined();
  }, 90_000);

  it('500 every time: exactly 8 signed attempts, then dead-lettered in the row, the queue, the list and the operator lookup', async () => {
    const tenant = await t.tenant();
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await endpointAt(tenant, `${r.url}/down`);
    const { id, workflowId } = await sendTest(tenant, endpoint.id);

    await untilStored(t.orm, id, (row) => row.status === 'dead_lettered', 120_000);
    await t.idle();
    expect(await expectArrivalsMatchAttempts(id, r, endpoint.secret)).toBe(8);
    expect(await storedDeadLetters(t.orm, id)).toEqual([expect.objectContaining({ organization_id: tenant.organizationId, endpoint_id: endpoint.id })]);
    const listed = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    const mine = listed.body.endpoints.find((e: { id: string }) => e.id === endpoint.id);
    expect(mine.recentDeliveries[0]).toMatchObject({ id, status: 'dead_lettered', attemptCount: 8 });
    const looked = await client(OperatorService, t.url, 'grpc', t.config.operatorToken).getDelivery({ deliveryId: id });
    expect(looked.delivery).toMatchObject({ status: 'dead_lettered', attemptCount: 8, deadLettered: true, workflowId });
    expect(looked.delivery!.attempts.map((a) => a.httpStatus)).toEqual(Array(8).fill(500));
    if (engine === 'temporal') {
      expect(await temporalView(workflowId, 'dead-lettered-after-eight')).toEqual({ result: { status: 'dead_lettered' }, lastActivityAttempt: 8 });
    }
  }, 150_000);

  it('an endpoint disabled before the attempt: failed at once with a reason, nothing sent, no dead letter', async () => {
    const tenant = await t.tenant();
    const r = await receiver(() => ({ status: 500 }));
    const endpoint = await endpointAt(tenant, `${r.url}/gone`);
    const { id, workflowId } = await sendTest(tenant, endpoint.id);
    await untilStored(t.orm, id, (row) => row.attempt_count === 1, 30_000);
    expect((await rest(t.url, 'DELETE', `/api/v1/webhooks/${endpoint.id}`, { apiKey: tenant.apiKey })).status).toBe(200);

    const failed = await untilStored(t.orm, id, (row) => row.status === 'failed', 60_000);
    await t.idle();
    expect(failed.last_error).toMatch(/disabled/i);
    expect(failed.attempt_count).toBe(1);
    expect(r.requests).toHaveLength(1);
    expect(await storedDeadLetters(t.orm, id)).toEqual([]);
    if (engine === 'temporal') {
      expect((await temporalView(workflowId, 'endpoint-gone')).result).toMatchObject({ status: 'failed' });
    }
  }, 90_000);

  it('a signing secret no configured key opens: dead-lettered at once with a reason of ours, nothing sent, no attempt used', async () => {
    const tenant = await t.tenant();
    const r = await receiver(() => ({ status: 200 }));
    const endpoint = await endpointAt(tenant, `${r.url}/sealed-away`);
    // As after a key rotation that dropped the key this secret was sealed under.
    await t.orm.em.fork().execute(`update webhook_endpoints set secret_key_id = 'retired-key' where id = ?`, [endpoint.id], 'run');
    const { id, workflowId } = await sendTest(tenant, endpoint.id);

    const final = await untilStored(t.orm, id, (row) => row.status === 'dead_lettered', 30_000);
    await t.idle();
    expect(final.attempt_count).toBe(0);
    expect(final.last_error).toMatch(/^Not sent: the delivery failed on our side/);
    expect(r.requests).toHaveLength(0);
    expect((await storedAttempts(t.orm, id)).every((a) => a.dispatched_at === null)).toBe(true);
    expect(await storedDeadLetters(t.orm, id)).toEqual([expect.objectContaining({ last_error: final.last_error })]);
    if (engine === 'temporal') {
      expect((await temporalView(workflowId, 'abandoned-secret-unopenable')).result).toEqual({ status: 'dead_lettered', reason: final.last_error });
    }
  }, 60_000);

  it.each(['organization', 'global'] as const)('a %s kill switch in the middle of retries: nothing sent while on, sent within 2 s of off', async (scope) => {
    const tenant = await t.tenant();
    const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
    const r = await receiver((i) => (i < 1 ? { status: 500 } : { status: 200 }));
    const endpoint = await endpointAt(tenant, `${r.url}/switch`);
    const { id, workflowId } = await sendTest(tenant, endpoint.id);
    await untilStored(t.orm, id, (row) => row.status === 'retrying' && row.attempt_count === 1, 30_000);
    const organizationId = scope === 'organization' ? tenant.organizationId : '';
    await operator.setKillSwitch({ organizationId, enabled: true, reason: 'incident 7' });
    try {
      // The retry comes due while the switch is on: it is held, uses no attempt and sends nothing.
      const held = await untilStored(t.orm, id, (row) => row.status === 'held', 30_000);
      expect(held.attempt_count).toBe(1);
      expect(r.requests).toHaveLength(1);
    } finally {
      await operator.setKillSwitch({ organizationId, enabled: false, reason: '' });
    }
    const off = Date.now();
    const [, arrival] = await r.waitForRequests(2, 30_000);
    // Without the release the held delivery would wait out its interval (4 s, and the embedded
    // engine's next poll after that); 2 s is the promise.
    expect(arrival!.receivedAt - off).toBeLessThan(2_000);
    await untilStored(t.orm, id, (row) => row.status === 'delivered', 30_000);
    await t.idle();
    expect(await expectArrivalsMatchAttempts(id, r, endpoint.secret)).toBe(2);
    if (engine === 'temporal') {
      expect(await temporalView(workflowId, `held-by-${scope}-switch-then-released`)).toEqual({ result: { status: 'delivered', attempts: 2 }, lastActivityAttempt: 1 });
    }
  }, 90_000);
});
