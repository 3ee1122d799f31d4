import type { TestApp, Tenant } from '../support/app';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from '../support/https-receiver';
import { signedWith, storedAttempts, storedDelivery, untilStored, type StoredDelivery } from '../support/deliveries';
import { RETRY_INTERVAL_MS } from '../../workflows/policy';

/**
 * Pausing an endpoint end to end, on both engines (test/support/engines.ts): its deliveries are held as the kill switch
 * holds them (nothing sent, nothing lost, no attempt used), new events are recorded and
 * held, and on resume everything goes out at once. Absence is asserted only after a point
 * the service signals (the delivery stored as held, held again, the engine idle).
 */

let tls: TestTls;
const receivers: HttpsReceiver[] = [];
beforeAll(async () => {
  tls = await makeTestTls();
});
afterAll(async () => {
  for (const r of receivers) await r.close();
});

/** A receiver that fails the first `failures` requests of each event with a 500, then answers 200. */
async function flakyReceiver(failures: number): Promise<HttpsReceiver> {
  const seen = new Map<string, number>();
  const r: HttpsReceiver = await startHttpsReceiver({
    tls,
    respond: (index) => {
      const eventId = JSON.parse(r.requests[index]!.rawBody).id as string;
      const n = (seen.get(eventId) ?? 0) + 1;
      seen.set(eventId, n);
      return { status: n <= failures ? 500 : 200 };
    },
  });
  receivers.push(r);
  return r;
}

async function createEndpoint(t: TestApp, tenant: Tenant, receiver: HttpsReceiver): Promise<{ id: string; secret: string }> {
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  return { id: created.body.endpoint.id, secret: created.body.signingSecret };
}

async function sendTest(t: TestApp, tenant: Tenant, endpointId: string): Promise<{ id: string; eventId: string }> {
  const test = await t.rest('POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  return { id: test.body.delivery.id, eventId: test.body.delivery.eventId };
}

async function setPaused(t: TestApp, tenant: Tenant, endpointId: string, paused: boolean): Promise<void> {
  const res = await t.rest('POST', `/api/v1/webhooks/${endpointId}/${paused ? 'pause' : 'resume'}`, { apiKey: tenant.apiKey });
  expect(res.status).toBe(200);
  expect(res.body.endpoint.state).toBe(paused ? 'paused' : 'active');
}

const arrivalsOf = (receiver: HttpsReceiver, eventId: string): ReceivedRequest[] => receiver.requests.filter((q) => JSON.parse(q.rawBody).id === eventId);

/** Every arrival of the delivery is an attempt recorded (and counted), each signed with the endpoint's secret. */
async function expectArrivalsMatchAttempts(t: TestApp, delivery: { id: string; eventId: string }, receiver: HttpsReceiver, secret: string): Promise<StoredDelivery> {
  const row = await storedDelivery(t.orm, delivery.id);
  const attempts = await storedAttempts(t.orm, delivery.id);
  const arrivals = arrivalsOf(receiver, delivery.eventId);
  expect(arrivals).toHaveLength(attempts.length);
  expect(row.attempt_count).toBe(attempts.length);
  expect(attempts.map((a) => a.attempt)).toEqual(attempts.map((_, i) => i + 1));
  expect(attempts.every((a) => a.dispatched_at !== null && a.finished_at !== null)).toBe(true);
  for (const arrival of arrivals) expect(signedWith(arrival, secret)).toBe(true);
  return row;
}

describe.each(ENGINES)('on the %s engine', (engine) => {
  describe('with retries in flight (short retry interval)', () => {
    const INTERVAL_MS = 1500;
    let app: EngineApp;
    beforeAll(async () => {
      app = await startEngineApp(engine, { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS) });
    });
    afterAll(async () => app?.close());

    it('sends nothing while paused, records new events held, and after resume delivers everything: arrivals = attempts, each signed', async () => {
      const t = app;
      const tenant = await t.tenant();
      const receiver = await flakyReceiver(2);
      const endpoint = await createEndpoint(t, tenant, receiver);

      // A delivery that fails twice, then succeeds: paused after its first failure, while its retry waits.
      const retried = await sendTest(t, tenant, endpoint.id);
      await untilStored(t.orm, retried.id, (row) => row.status === 'retrying' && row.attempt_count >= 1);
      await setPaused(t, tenant, endpoint.id, true);

      const held = await untilStored(t.orm, retried.id, (row) => row.status === 'held');
      await app.idle();
      const sentBeforePause = held.attempt_count;
      expect(sentBeforePause).toBeLessThan(3);
      await expectArrivalsMatchAttempts(t, retried, receiver, endpoint.secret);
      expect(receiver.requests).toHaveLength(sentBeforePause);

      // A new event to the paused endpoint is recorded and held, not dropped; no attempt is used.
      const fresh = await sendTest(t, tenant, endpoint.id);
      expect(await untilStored(t.orm, fresh.id, (row) => row.status === 'held')).toMatchObject({ attempt_count: 0 });
      expect(await storedAttempts(t.orm, fresh.id)).toEqual([]);

      // The held delivery came due again and was held again: an attempt's turn passed while paused, and nothing left.
      await untilStored(t.orm, retried.id, (row) => row.status === 'held' && row.next_attempt_at! > held.next_attempt_at!, 4 * INTERVAL_MS + 10_000);
      await app.idle();
      expect(receiver.requests).toHaveLength(sentBeforePause);
      expect(await storedDelivery(t.orm, retried.id)).toMatchObject({ status: 'held', attempt_count: sentBeforePause });

      await setPaused(t, tenant, endpoint.id, false);
      const resumedAt = Date.now();
      await untilStored(t.orm, retried.id, (row) => row.status === 'delivered', 4 * INTERVAL_MS + 10_000);
      await untilStored(t.orm, fresh.id, (row) => row.status === 'delivered');
      await app.idle();

      const afterResume = receiver.requests.slice(sentBeforePause);
      expect(afterResume.length).toBeGreaterThan(0);
      expect(Math.min(...afterResume.map((q) => q.receivedAt)) - resumedAt).toBeLessThan(2000);
      expect(await expectArrivalsMatchAttempts(t, retried, receiver, endpoint.secret)).toMatchObject({ status: 'delivered', attempt_count: 3 });
      expect(await expectArrivalsMatchAttempts(t, fresh, receiver, endpoint.secret)).toMatchObject({ status: 'delivered', attempt_count: 3 });
      expect(receiver.requests).toHaveLength(6);
    }, 90_000);
  });

  describe("with the contract's 30 s interval", () => {
    let app: EngineApp;
    beforeAll(async () => {
      // The embedded engine polls 20 s apart and a held Temporal workflow waits out 30 s unless
      // signalled: an arrival within 2 s of the resume can come only from the resume waking it.
      app = await startEngineApp(engine, { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20000' });
      expect(app.config.delivery.retryIntervalMs).toBe(RETRY_INTERVAL_MS);
    });
    afterAll(async () => app?.close());

    it('sends a held delivery within 2 s of the resume, not when its held interval ends', async () => {
      const t = app;
      const tenant = await t.tenant();
      const receiver = await flakyReceiver(0);
      const endpoint = await createEndpoint(t, tenant, receiver);
      await setPaused(t, tenant, endpoint.id, true);
      const delivery = await sendTest(t, tenant, endpoint.id);

      const held = await untilStored(t.orm, delivery.id, (row) => row.status === 'held');
      await app.idle();
      expect(held).toMatchObject({ attempt_count: 0 });
      expect(held.next_attempt_at! - Date.now()).toBeGreaterThan(RETRY_INTERVAL_MS / 2);
      expect(receiver.requests).toHaveLength(0);

      await setPaused(t, tenant, endpoint.id, false);
      const resumedAt = Date.now();
      const [arrival] = await receiver.waitForRequests(1, RETRY_INTERVAL_MS + 10_000);
      expect(arrival!.receivedAt - resumedAt).toBeLessThan(2000);
      await untilStored(t.orm, delivery.id, (row) => row.status === 'delivered');
      await app.idle();
      expect(await expectArrivalsMatchAttempts(t, delivery, receiver, endpoint.secret)).toMatchObject({ status: 'delivered', attempt_count: 1 });
    }, 60_000);
  });
});
