import { randomUUID } from 'node:crypto';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { main } from '../../src/operator/cli';
import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

const TOKEN = 'scheduler-token-0123456789abcdef0123456789';

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  t = await startTestApp({ INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20' });
  receiver = await startHttpsReceiver({ tls });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

/** The operator CLI's main, in this process, against the running test app (its spawned smoke test lives in test/operator). */
async function operator(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const status = await main(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken },
  });
  return { status, stdout, stderr };
}

describe('npm run operator -- event', () => {
  it('lists the deliveries of an event with their status', async () => {
    const tenant = await t.tenant();
    const endpoints: string[] = [];
    for (let i = 0; i < 2; i++) {
      const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['post.held'] } });
      endpoints.push(created.body.endpoint.id);
    }
    const eventId = `evt_${randomUUID()}`;
    await client(EventService, t.url, 'grpc', TOKEN).publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' });
    await receiver.waitForRequests(2);

    const text = await operator(['event', eventId, '--org', tenant.organizationId]);
    expect({ status: text.status, stderr: text.stderr }).toEqual({ status: 0, stderr: '' });
    expect(text.stdout).toContain(`event ${eventId}  post.held  organization ${tenant.organizationId}`);
    expect(text.stdout).toContain('published by scheduler');
    for (const id of endpoints) expect(text.stdout).toMatch(new RegExp(`(pending|delivered) +delivery [0-9a-f-]{36}  endpoint ${id}`));

    const json = await operator(['event', eventId, '--org', tenant.organizationId, '--json']);
    const answer = JSON.parse(json.stdout);
    expect(answer.event).toMatchObject({ eventId, eventType: 'post.held', publisher: 'scheduler' });
    expect(answer.deliveries.map((d: { endpointId: string }) => d.endpointId).sort()).toEqual([...endpoints].sort());
  });

  it('says EVENT_NOT_FOUND for an unknown event, and needs the event id and --org', async () => {
    const tenant = await t.tenant();
    const missing = await operator(['event', 'evt_missing', '--org', tenant.organizationId]);
    expect({ status: missing.status, stderr: missing.stderr }).toEqual({ status: 1, stderr: expect.stringContaining('operator: EVENT_NOT_FOUND:') });
    for (const args of [['event', '--org', tenant.organizationId], ['event', 'evt_1'], ['event', 'evt_1', 'extra', '--org', tenant.organizationId], ['event', 'evt_1', '--org', tenant.organizationId, '--limit', '5']]) {
      const run = await operator(args);
      expect({ args, status: run.status }).toEqual({ args, status: 2 });
    }
  });
});
