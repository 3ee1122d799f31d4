import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { EVENT_CATALOG } from '../../src/webhooks/catalog';
import { startTestApp, type TestApp } from '../support/app';
import { approveSandboxAccount, connectSandboxAccount } from '../support/connections';
import { makeTestTls } from '../support/tls';
import { within } from '../support/within';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

/**
 * The event catalog (ListEventTypes, the README and the portal) says what each event's
 * `data` holds. Here every type is caused through the public API, as a customer would, and
 * the bodies the receiver got are validated against the catalog's schemas.
 */
let t: TestApp;
let receiver: HttpsReceiver;
const ajv = addFormats(new Ajv2020({ strict: true, allErrors: true }));

beforeAll(async () => {
  const tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20' });
  receiver = await startHttpsReceiver({ tls });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

it('serves every event type with a description, a schema and an example the schema accepts', async () => {
  const tenant = await t.tenant();
  const answer = await t.rest('GET', '/api/v1/event-types', { apiKey: tenant.apiKey });
  expect(answer.status).toBe(200);
  const served = answer.body.eventTypes as { name: string; description: string; schema: object; example: object }[];
  expect(served.map((e) => e.name)).toEqual(EVENT_CATALOG.map((e) => e.name));
  expect(served.map((e) => e.name)).toEqual([...served.map((e) => e.name)].sort());
  for (const entry of served) {
    expect(entry.description.length).toBeGreaterThan(10);
    const validate = ajv.compile(entry.schema);
    expect({ name: entry.name, valid: validate(entry.example), errors: validate.errors ?? null }).toEqual({ name: entry.name, valid: true, errors: null });
  }
});

it('validates the bodies actually delivered for every type of the catalog', async () => {
  const tenant = await t.tenant();
  const api = (method: string, path: string, body: unknown = {}) => t.rest(method, path, { apiKey: tenant.apiKey, body: method === 'GET' ? undefined : body });
  const names = EVENT_CATALOG.map((e) => e.name);
  const watcher = await api('POST', '/api/v1/webhooks', { url: `${receiver.url}/catalog`, eventNames: names });
  const other = await api('POST', '/api/v1/webhooks', { url: `${receiver.url}/other` });
  expect([watcher.status, other.status]).toEqual([200, 200]);
  const otherId = other.body.endpoint.id as string;

  const connection = await connectSandboxAccount(t.url, tenant.apiKey, 'instagram', 'bakery');
  expect((await api('POST', `/api/v1/connections/${connection.id}/confirm`, { confirmIdentity: true })).status).toBe(200);
  const scheduledAt = new Date(Date.now() + 86_400_000).toISOString();
  expect((await api('POST', '/api/v1/posts', { connectionId: connection.id, text: 'Catalog', scheduledAt })).status).toBe(200);
  // A reconnect that returns another account holds the destination and its post.
  const connections = t.client(ConnectionService, tenant.apiKey);
  const restart = await connections.startConnection({ toolkit: 'instagram', connectionId: connection.id });
  const creator = await approveSandboxAccount(t.url, restart.redirectUrl, 'creator');
  expect((await connections.completeConnection({ state: restart.state, connectedAccountId: creator })).connection?.status).toBe('held');
  expect((await api('POST', `/api/v1/connections/${connection.id}/confirm`, { confirmIdentity: true })).status).toBe(200);
  expect((await api('POST', `/api/v1/connections/${connection.id}/release`)).status).toBe(200);
  expect((await api('POST', `/api/v1/connections/${connection.id}/disable`, { reason: 'catalog check' })).status).toBe(200);
  expect((await api('POST', `/api/v1/webhooks/${otherId}/pause`)).status).toBe(200);
  expect((await api('POST', `/api/v1/webhooks/${otherId}/resume`)).status).toBe(200);
  const since = new Date(Date.now() - 3_600_000).toISOString();
  expect((await api('POST', `/api/v1/webhooks/${otherId}/recover`, { since })).status).toBe(200);
  expect((await api('POST', `/api/v1/webhooks/${watcher.body.endpoint.id}/test`)).status).toBe(200);

  const seen = () => new Set(receiver.requests.filter((r) => r.path === '/catalog').map((r) => (JSON.parse(r.rawBody) as { type: string }).type));
  expect(await within(15_000, async () => names.every((name) => seen().has(name)))).toBe(true);

  for (const request of receiver.requests.filter((r) => r.path === '/catalog')) {
    const body = JSON.parse(request.rawBody) as { id: string; type: string; createdAt: string; data: unknown };
    const entry = EVENT_CATALOG.find((e) => e.name === body.type);
    expect({ type: body.type, known: Boolean(entry) }).toEqual({ type: body.type, known: true });
    const validate = ajv.compile(entry!.schema);
    expect({ type: body.type, valid: validate(body.data), errors: validate.errors ?? null, data: body.data }).toMatchObject({ type: body.type, valid: true, errors: null });
    expect(Object.keys(body).sort()).toEqual(['createdAt', 'data', 'id', 'type']);
  }
});
