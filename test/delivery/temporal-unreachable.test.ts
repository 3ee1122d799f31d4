import net from 'node:net';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';

/**
 * With TEMPORAL_ADDRESS pointing where nothing answers, the API still starts and serves:
 * /readyz and the metrics say Temporal is down, and a delivery is recorded pending for the
 * sweep to start once Temporal answers (test/delivery/pending-sweeper.test.ts).
 */
let t: TestApp;

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  t = await startTestApp({ TEMPORAL_ADDRESS: `127.0.0.1:${await closedPort()}` });
});
afterAll(async () => {
  await t?.close();
});

it('starts, stays ready but names Temporal as down, and records deliveries pending', async () => {
  const ready = await fetch(`${t.url}/readyz`);
  expect({ status: ready.status, body: await ready.json() }).toEqual({ status: 200, body: { status: 'degraded', down: ['temporal'] } });
  const metrics = await (await fetch(`${t.url}/metrics`)).text();
  expect(metrics).toMatch(/^webhook_delivery_engine_reachable 0$/m);

  const tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
  expect(created.status).toBe(200);
  const sent = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
  expect(sent.status).toBe(200);
  expect(sent.body.delivery).toMatchObject({ status: 'pending' });
  const [row] = await t.orm.em.fork().execute<{ status: string }[]>('select status from webhook_deliveries where id = ?', [sent.body.delivery.id]);
  expect(row!.status).toBe('pending');
});
