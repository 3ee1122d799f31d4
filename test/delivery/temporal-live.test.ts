import { createHmac } from 'node:crypto';
import { NativeConnection, Worker } from '@temporalio/worker';
import { Client, Connection } from '@temporalio/client';
import { activityDepsFromConfig, createActivities } from '../../src/delivery';
import { createLogger } from '../../src/config/logger';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

// Runs against a real Temporal server only: no registry ships one for these machines, so CI
// cannot start it. Locally: `temporal server start-dev`, then
// `TEMPORAL_ADDRESS=localhost:7233 npm test -- test/delivery/temporal-live.test.ts`.
const live = process.env.TEMPORAL_ADDRESS ? describe : describe.skip;

live('deliveries on a real Temporal server', () => {
  const taskQueue = `webhook-deliveries-test-${process.pid}`;
  let t: TestApp;
  let receiver: HttpsReceiver;
  let worker: Worker;
  let running: Promise<void>;
  let connection: NativeConnection;
  let client: Client;

  beforeAll(async () => {
    const tls = await makeTestTls();
    receiver = await startHttpsReceiver({ tls, respond: (i) => (i < 1 ? { status: 500 } : { status: 200 }) });
    t = await startTestApp({ TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!, TEMPORAL_TASK_QUEUE: taskQueue, DELIVERY_EXTRA_CA_PEM: tls.caPem });
    connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS! });
    worker = await Worker.create({
      connection,
      taskQueue,
      workflowsPath: require.resolve('../../workflows'),
      activities: createActivities(activityDepsFromConfig(t.config, { orm: t.orm, logger: createLogger('silent') })),
    });
    running = worker.run();
    client = new Client({ connection: await Connection.connect({ address: process.env.TEMPORAL_ADDRESS! }) });
  });

  afterAll(async () => {
    worker?.shutdown();
    await running;
    await connection?.close();
    await client?.connection.close();
    await receiver?.close();
    await t?.close();
  });

  it('runs a delivery as a workflow: the failed first attempt is retried after 30 s and the second is signed and delivered', async () => {
    const tenant = await t.tenant();
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/live` } });
    const sent = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(sent.status).toBe(200);
    const result = await client.workflow.getHandle(sent.body.delivery.workflowId).result();
    expect(result).toEqual({ status: 'delivered', attempts: 2 });
    const [first, second] = receiver.requests;
    expect(second!.receivedAt - first!.receivedAt).toBeGreaterThanOrEqual(29_000);
    const ts = second!.headers['x-service-timestamp'] as string;
    expect(second!.headers['x-service-signature']).toBe(createHmac('sha256', created.body.signingSecret).update(`${ts}.${second!.rawBody}`).digest('hex'));
    const description = await client.workflow.getHandle(sent.body.delivery.workflowId).describe();
    expect(await description.memo).toMatchObject({ organizationId: tenant.organizationId, endpointId: created.body.endpoint.id, eventType: 'webhook.test' });
  }, 90_000);
});
