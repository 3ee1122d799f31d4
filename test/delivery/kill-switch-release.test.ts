import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { signedWith, storedAttempts, storedDelivery, untilStored } from '../support/deliveries';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { RETRY_INTERVAL_MS } from '../../workflows/policy';

/**
 * The kill switch end to end on the embedded engine, with the contract's real 30 s retry
 * interval: while on, nothing leaves and no attempt is used; off, the held delivery goes out
 * at once, not at the next poll or when its held interval ends.
 */
let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 200 }) });
  // Polls 20 s apart: an early arrival can come only from the release waking the engine.
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20000' });
  expect(t.config.delivery.retryIntervalMs).toBe(30_000);
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

it('holds the delivery while the switch is on, and sends it within 2 s of the switch going off', async () => {
  const tenant = await t.tenant();
  const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
  await operator.setKillSwitch({ organizationId: tenant.organizationId, enabled: true, reason: 'incident 42' });
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  const test = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  const id = test.body.delivery.id as string;

  const held = await untilStored(t.orm, id, (row) => row.status === 'held');
  await t.app.delivery.embedded!.idle();
  expect(held).toMatchObject({ attempt_count: 0 });
  expect(held.next_attempt_at! - Date.now()).toBeGreaterThan(RETRY_INTERVAL_MS / 2);
  expect(receiver.requests).toHaveLength(0);
  expect(await storedAttempts(t.orm, id)).toEqual([]);

  await operator.setKillSwitch({ organizationId: tenant.organizationId, enabled: false, reason: '' });
  const off = Date.now();
  const [arrival] = await receiver.waitForRequests(1, RETRY_INTERVAL_MS + 10_000);
  // Not timing-flaky: without the release, this request could leave only at the next poll
  // (20 s) or when the held row came due (30 s after it was held); 2 s against 20 s leaves
  // room for any load.
  expect(arrival!.receivedAt - off).toBeLessThan(2000);
  expect(signedWith(arrival!, created.body.signingSecret)).toBe(true);
  expect(JSON.parse(arrival!.rawBody)).toMatchObject({ type: 'webhook.test', data: { endpointId: created.body.endpoint.id } });

  await untilStored(t.orm, id, (row) => row.status === 'delivered');
  await t.app.delivery.embedded!.idle();
  expect(await storedDelivery(t.orm, id)).toMatchObject({ status: 'delivered', attempt_count: 1 });
  expect(receiver.requests).toHaveLength(1);
}, 60_000);
