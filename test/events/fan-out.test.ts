import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { verifyWebhook } from '../../src/signatures';
import { SecretBox, newSigningSecret } from '../../src/secrets';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { within } from '../support/within';

const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const SUBSCRIBERS = 1000;

/**
 * Every statement each pooled connection sends, in order. The statements of one publish
 * are those its transaction sent: from the `begin` before the statement that records it
 * into "events" to the `commit` after it, on that one connection, whatever else the
 * service runs meanwhile.
 */
const sent = new Map<PoolClient, { text: string; values: unknown[] }[]>();
function watch(pool: Pool): void {
  pool.on('connect', (connection) => {
    const log: { text: string; values: unknown[] }[] = [];
    sent.set(connection, log);
    const query = connection.query.bind(connection) as (...args: unknown[]) => unknown;
    (connection as { query: unknown }).query = (...args: unknown[]) => {
      const [text, values] = args;
      if (typeof text === 'string') log.push({ text, values: Array.isArray(values) ? values : [] });
      return query(...args);
    };
  });
}

function transactionOf(eventId: string): string[] {
  for (const log of sent.values()) {
    const at = log.findIndex((s) => /insert into "?events"?/.test(s.text) && JSON.stringify(s.values).includes(JSON.stringify(eventId)));
    if (at < 0) continue;
    const texts = log.map((s) => s.text);
    const begin = texts.slice(0, at).findLastIndex((text) => /^(begin|start transaction)/i.test(text));
    const commit = texts.indexOf('commit', at);
    return texts.slice(begin, commit + 1);
  }
  return [];
}

let t: TestApp;
let receiver: HttpsReceiver;
let tenant: Tenant;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls });
  t = await startTestApp(
    {
      INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`,
      DELIVERY_EXTRA_CA_PEM: tls.caPem,
      DELIVERY_POLL_INTERVAL_MS: '50',
      DELIVERY_CONCURRENCY: '32',
      // The receiver shares this process with the service: on a busy machine an answer can
      // miss its deadline, and the retry it causes is at-least-once delivery, not a failure.
      DELIVERY_TEST_RETRY_INTERVAL_MS: '200',
    },
    { orm: { driverOptions: { onPoolCreated: watch } } },
  );
  tenant = await t.tenant({ plan: 'command' });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

/** Endpoints with real sealed secrets, written in one statement: the API would take 1,000 calls. */
async function subscribe(count: number, eventNames: string[]): Promise<Map<string, string>> {
  const box = new SecretBox(t.config.secretKeys, t.config.currentSecretKeyId);
  const secrets = new Map<string, string>();
  const rows = Array.from({ length: count }, () => {
    const id = randomUUID();
    const secret = newSigningSecret();
    secrets.set(id, secret);
    return { id, sealed: box.seal(secret, id) };
  });
  await t.orm.em.fork().execute(
    `insert into webhook_endpoints (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
     select id, ?, ?, '', ?::text[], key_id, decode(sealed, 'hex'), now(), now()
       from unnest(?::uuid[], ?::text[], ?::text[]) as r(id, key_id, sealed)`,
    [
      tenant.organizationId,
      `${receiver.url}/fan-out`,
      `{${eventNames.join(',')}}`,
      `{${rows.map((r) => r.id).join(',')}}`,
      `{${rows.map((r) => r.sealed.keyId).join(',')}}`,
      `{${rows.map((r) => r.sealed.ciphertext.toString('hex')).join(',')}}`,
    ],
    'run',
  );
  return secrets;
}

it('arrives at a real HTTPS receiver signed, with the documented body', async () => {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/one`, eventNames: ['connection.verified'] } });
  const secret = created.body.signingSecret as string;
  const eventId = `evt_${randomUUID()}`;
  const occurredAt = new Date('2026-11-24T09:30:00.000Z');
  const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent({
    organizationId: tenant.organizationId,
    eventId,
    eventType: 'connection.verified',
    payload: { connectionId: 'c_1', toolkit: 'instagram', nested: { list: [1, 'two', null, true] } },
    occurredAt: { seconds: BigInt(occurredAt.getTime() / 1000), nanos: 0 },
  });
  expect(event?.deliveries).toHaveLength(1);

  const [request] = await receiver.waitForRequests(1, 10_000);
  expect(request!.path).toBe('/one');
  expect(() => verifyWebhook(secret, request!.headers, request!.rawBody)).not.toThrow();
  expect(JSON.parse(request!.rawBody)).toEqual({
    id: eventId,
    type: 'connection.verified',
    createdAt: '2026-11-24T09:30:00.000Z',
    data: { connectionId: 'c_1', toolkit: 'instagram', nested: { list: [1, 'two', null, true] } },
  });
  expect(Object.keys(JSON.parse(request!.rawBody))).toEqual(['id', 'type', 'createdAt', 'data']);
});

it(`records ${SUBSCRIBERS} deliveries in as many statements as one, and the embedded engine delivers every one`, async () => {
  const publish = async (eventType: string) => {
    const eventId = `evt_${randomUUID()}`;
    const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent({ organizationId: tenant.organizationId, eventId, eventType, payload: { n: 1 } });
    return { event: event!, statements: transactionOf(eventId) };
  };
  await subscribe(1, ['post.released']);
  const secrets = await subscribe(SUBSCRIBERS, ['post.held']);
  const before = receiver.requests.length;

  const one = await publish('post.released');
  const many = await publish('post.held');
  expect(one.event.deliveries).toHaveLength(1);
  expect(many.event.deliveries).toHaveLength(SUBSCRIBERS);
  expect(many.statements.length).toBeGreaterThan(2);
  expect(many.statements.length).toBe(one.statements.length);
  expect(many.statements.filter((s) => s.includes('insert into "webhook_deliveries"'))).toHaveLength(1);

  const allDelivered = await within(150_000, async () => {
    const [row] = await t.orm.em.fork().execute<{ n: string }[]>(`select count(*) as n from webhook_deliveries where event_id = ? and status = 'delivered'`, [many.event.eventId]);
    return Number(row!.n) === SUBSCRIBERS;
  });
  expect(allDelivered).toBe(true);
  // Each endpoint got the event, signed with its own secret (a retried attempt may have sent it twice).
  const held = receiver.requests.slice(before).filter((r) => JSON.parse(r.rawBody).id === many.event.eventId);
  const signers = new Set(
    held.map((r) =>
      [...secrets].find(([, secret]) => {
        try {
          verifyWebhook(secret, r.headers, r.rawBody);
          return true;
        } catch {
          return false;
        }
      })?.[0],
    ),
  );
  expect(signers.has(undefined)).toBe(false);
  expect(signers.size).toBe(SUBSCRIBERS);
}, 180_000);
