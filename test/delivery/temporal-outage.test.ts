import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { startTemporalDevServer, type DevServer } from '../../scripts/temporal-server';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { within } from '../support/within';

/**
 * Temporal down and back, with a development server of this suite's own (its SQLite file
 * survives the restart): a delivery recorded while it is down is answered pending at once,
 * and its workflow starts within seconds of the server's return, long before the sweep's
 * threshold would start it (10 s) and before gRPC's reconnect backoff would have tried again.
 */
let dir: string;
let server: DevServer;
let t: TestApp;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'temporal-outage-'));
  server = await startTemporalDevServer({ dbFile: path.join(dir, 'temporal.sqlite'), uiPort: false });
  t = await startTestApp({ TEMPORAL_ADDRESS: server.address, TEMPORAL_TASK_QUEUE: `outage-${randomBytes(6).toString('hex')}` });
}, 120_000);

afterAll(async () => {
  await t?.close();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function testDelivery(apiKey: string, endpointId: string): Promise<{ status: number; delivery: { id: string; status: string; workflowId: string } }> {
  const sent = await rest(t.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey });
  return { status: sent.status, delivery: sent.body.delivery };
}

it('records a delivery pending while Temporal is down, and starts its workflow within seconds of its return', async () => {
  const tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
  expect(created.status).toBe(200);
  const before = await testDelivery(tenant.apiKey, created.body.endpoint.id);
  expect(before.status).toBe(200);

  await server.kill();
  const during = await testDelivery(tenant.apiKey, created.body.endpoint.id);
  expect(during).toMatchObject({ status: 200, delivery: { status: 'pending' } });
  // Found down: the app's probe has failed at least once before the server returns.
  expect(await within(10_000, async () => ((await (await fetch(`${t.url}/readyz`)).json()) as { down?: string[] }).down?.includes('temporal') === true)).toBe(true);

  server = await startTemporalDevServer(server.options);
  const client = new Client({ connection: await Connection.connect({ address: server.address }) });
  try {
    const exists = async () =>
      client.workflow
        .getHandle(during.delivery.workflowId)
        .describe()
        .then(
          () => true,
          () => false,
        );
    expect(await within(4_000, exists)).toBe(true);
  } finally {
    await client.connection.close();
  }
}, 120_000);
