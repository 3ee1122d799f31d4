import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { signedWith, untilStored } from '../support/deliveries';
import { MAX_ATTEMPTS } from '../../workflows/policy';

/**
 * A customer's endpoint is down until its deliveries are dead-lettered, then comes back;
 * a recovery since the start of the outage sends each event once more, signed, with the
 * same event id and body, and the delivery log shows both series. Against the real HTTPS
 * receiver, on each engine.
 */
const ENV = { DELIVERY_POLL_INTERVAL_MS: '100', DELIVERY_TEST_RETRY_INTERVAL_MS: '500' };

let tls: TestTls;
beforeAll(async () => {
  tls = await makeTestTls();
});

describe.each(ENGINES)('on the %s engine', (engine) => {
  let t: EngineApp;
  let receiver: HttpsReceiver;
  let down = true;

  beforeAll(async () => {
    t = await startEngineApp(engine, { ...ENV, DELIVERY_EXTRA_CA_PEM: tls.caPem });
    receiver = await startHttpsReceiver({ tls, respond: () => (down ? { status: 503, body: 'down for maintenance' } : { status: 200, body: 'ok' }) });
  });
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  it('recovers every event of an outage once, signed, with the same event id, as a second series', async () => {
    const tenant = await t.tenant();
    const outageStart = new Date(Date.now() - 1000).toISOString();
    const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hooks`, eventNames: ['webhook.test'] } });
    expect(created.status).toBe(200);
    const endpointId: string = created.body.endpoint.id;
    const secret: string = created.body.signingSecret;

    const sent: { id: string; eventId: string }[] = [];
    for (let i = 0; i < 2; i++) {
      const test = await t.rest('POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
      expect(test.status).toBe(200);
      sent.push({ id: test.body.delivery.id, eventId: test.body.delivery.eventId });
    }
    for (const d of sent) await untilStored(t.orm, d.id, (row) => row.status === 'dead_lettered', 60_000);
    await t.idle();
    const duringOutage = receiver.requests.length;
    expect(duringOutage).toBe(2 * MAX_ATTEMPTS);
    const firstBodies = new Map(receiver.requests.map((r) => [JSON.parse(r.rawBody).id as string, r.rawBody]));

    down = false;
    const asked = await t.rest('POST', `/api/v1/webhooks/${endpointId}/recover`, { apiKey: tenant.apiKey, body: { since: outageStart } });
    expect(asked.status).toBe(200);
    expect(asked.body).toMatchObject({ found: 2, recovery: { state: 'queued', found: 2 } });
    const jobId: string = asked.body.recovery.id;

    for (const d of sent) await untilStored(t.orm, d.id, (row) => row.status === 'delivered', 60_000);
    const recovered = await receiver.waitForRequests(duringOutage + 2);
    const again = recovered.slice(duringOutage);
    expect(again.map((r) => JSON.parse(r.rawBody).id).sort()).toEqual(sent.map((d) => d.eventId).sort());
    for (const request of again) {
      expect(signedWith(request, secret)).toBe(true);
      expect(request.answered).toBe(200);
      expect(request.rawBody).toBe(firstBodies.get(JSON.parse(request.rawBody).id));
    }

    const job = await untilJob(t, tenant.apiKey, endpointId, jobId);
    expect(job).toMatchObject({ state: 'finished', found: 2, resent: 2 });

    for (const d of sent) {
      const detail = await t.rest('GET', `/api/v1/webhooks/${endpointId}/deliveries/${d.id}`, { apiKey: tenant.apiKey });
      expect(detail.status).toBe(200);
      expect(detail.body).toMatchObject({ series: 2, delivery: { status: 'delivered', eventId: d.eventId, attemptCount: 1 } });
      expect(detail.body.delivery.workflowId).toMatch(/\/series-2$/);
      const attempts: { series: number; attempt: number; responseStatus: number; errorClass?: string; responseExcerpt?: string }[] = detail.body.attempts;
      expect(attempts.map((a) => [a.series, a.attempt])).toEqual([...Array.from({ length: MAX_ATTEMPTS }, (_, i) => [1, i + 1]), [2, 1]]);
      expect(attempts.slice(0, MAX_ATTEMPTS).every((a) => a.responseStatus === 503 && a.errorClass === 'http_status' && a.responseExcerpt === 'down for maintenance')).toBe(true);
      expect(attempts[MAX_ATTEMPTS]).toMatchObject({ series: 2, attempt: 1, responseStatus: 200, responseExcerpt: 'ok' });
      expect(attempts[MAX_ATTEMPTS]!.errorClass ?? '').toBe('');
    }
    // Once the engine is idle nothing more arrives: the endpoint has each event twice in all, once per series.
    await t.idle();
    expect(receiver.requests.length).toBe(duringOutage + 2);
  }, 120_000);
});

/** Reads the recovery job through its route until it is no longer queued or running. */
async function untilJob(t: EngineApp, apiKey: string, endpointId: string, jobId: string): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const answer = await t.rest('GET', `/api/v1/webhooks/${endpointId}/recoveries/${jobId}`, { apiKey });
    expect(answer.status).toBe(200);
    if (!['queued', 'running'].includes(answer.body.recovery.state)) return answer.body.recovery;
    if (Date.now() > deadline) throw new Error(`recovery ${jobId} still ${answer.body.recovery.state}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
