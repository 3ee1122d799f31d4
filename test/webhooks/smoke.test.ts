import { createHmac } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver } from '../support/https-receiver';
import { untilStored } from '../support/deliveries';

let t: TestApp;
afterAll(async () => t?.close());

it('sends a signed webhook.test to a real HTTPS receiver', async () => {
  const tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50' });
  const receiver = await startHttpsReceiver({ tls });
  const tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hooks`, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  const secret = created.body.signingSecret as string;
  const test = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  const [request] = await receiver.waitForRequests(1, 5000);
  const ts = request!.headers['x-service-timestamp'] as string;
  const expected = createHmac('sha256', secret).update(`${ts}.${request!.rawBody}`).digest('hex');
  expect(request!.headers['x-service-signature']).toBe(expected);
  // The receiver has answered; the outcome is stored after that, so wait for the row.
  await untilStored(t.orm, test.body.delivery.id as string, (row) => row.status === 'delivered');
  const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.status).toBe(200);
  expect(list.body.endpoints[0].recentDeliveries[0]).toMatchObject({ status: 'delivered', attemptCount: 1 });
  await receiver.close();
});
