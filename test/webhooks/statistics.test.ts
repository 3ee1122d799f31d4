import { startTestApp, type TestApp } from '../support/app';
import { untilStored } from '../support/deliveries';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20', DELIVERY_TEST_RETRY_INTERVAL_MS: '50' }, { listen: false });
  receiver = await startHttpsReceiver({ tls, respond: (index) => (index === 0 ? { status: 503, body: 'busy' } : { status: 200 }) });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

it("counts an endpoint's deliveries of the period by status, with attempts, response times and the last failure", async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/stats` } });
  const id = created.body.endpoint.id as string;
  const deliveries: string[] = [];
  for (let i = 0; i < 3; i++) {
    const sent = await t.rest('POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey, body: {} });
    deliveries.push(sent.body.delivery.id as string);
  }
  for (const deliveryId of deliveries) await untilStored(t.orm, deliveryId, (row) => row.status === 'delivered');
  // One more, recorded two days ago: outside 24 h, inside 7 days.
  await t.orm.em.fork().execute("update webhook_deliveries set created_at = now() - interval '2 days' where id = ?", [deliveries[2]]);

  const day = await t.rest('GET', `/api/v1/webhooks/${id}/statistics`, { apiKey: tenant.apiKey });
  expect(day.status).toBe(200);
  expect(day.body).toMatchObject({ period: '24h', total: 2, successRate: 1, byStatus: [{ status: 'delivered', count: 2 }] });
  const week = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=7d`, { apiKey: tenant.apiKey });
  expect(week.body).toMatchObject({ period: '7d', total: 3, attempts: 4, successRate: 1 });
  expect(Number(week.body.responseTimeP50Ms)).toBeGreaterThanOrEqual(0);
  expect(Number(week.body.responseTimeP95Ms)).toBeGreaterThanOrEqual(Number(week.body.responseTimeP50Ms));
  const [failed] = await t.orm.em.fork().execute<{ delivery_id: string }[]>('select delivery_id from delivery_attempts where response_status = 503');
  expect(week.body.lastFailure).toMatchObject({ deliveryId: failed!.delivery_id, responseStatus: 503 });
  expect(week.body.lastFailure.error).toContain('503');
});

it('answers an endpoint with no deliveries with zeros, and refuses an unknown period', async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/quiet` } });
  const id = created.body.endpoint.id as string;
  const empty = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=30d`, { apiKey: tenant.apiKey });
  expect(empty.status).toBe(200);
  expect(empty.body.total ?? 0).toBe(0);
  expect(empty.body.lastFailure).toBeUndefined();
  const refused = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=1y`, { apiKey: tenant.apiKey });
  expect([refused.status, refused.body.code]).toEqual([400, 'STATISTICS_PERIOD_INVALID']);
});
