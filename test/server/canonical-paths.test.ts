/**
 * The REST gateway routes only the canonical spelling of a path. Each request goes over a
 * raw socket because fetch and Node's clients resolve dot segments before sending.
 */
import http2 from 'node:http2';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { rest } from '../support/clients';
import { http1Request, rawH2, rawHttp1 } from '../robustness/support';

let t: TestApp;
let tenant: Tenant;
let id: string;
beforeAll(async () => {
  t = await startTestApp();
  tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
  expect(created.status).toBe(200);
  id = created.body.endpoint.id;
});
afterAll(async () => {
  await t.close();
});

const encodeEveryByte = (text: string) => [...Buffer.from(text)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

async function endpointDisabled(): Promise<boolean> {
  const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  return Boolean(list.body.endpoints.find((e: { id: string }) => e.id === id).disabled);
}

describe('non-canonical paths', () => {
  const forms: [string, () => string][] = [
    ['a dot segment', () => `/api/v1/webhooks/./${id}`],
    ['an encoded dot segment', () => `/api/v1/webhooks/%2e/${id}`],
    ['an encoded dot segment in capitals', () => `/api/v1/webhooks/%2E/${id}`],
    ['a dot-dot segment', () => `/api/v1/webhooks/${id}/../${id}`],
    ['an encoded dot-dot segment', () => `/api/v1/webhooks/x/%2e%2e/${id}`],
    ['an encoded slash', () => `/api/v1/webhooks%2f${id}`],
    ['an encoded slash in the id', () => `/api/v1/webhooks/${id}%2F`],
    ['an encoded backslash', () => `/api/v1/webhooks/${id}%5c`],
    ['a backslash', () => `/api/v1/webhooks\\${id}`],
    ['a fully percent-encoded id', () => `/api/v1/webhooks/${encodeEveryByte(id)}`],
    ['a partly percent-encoded id', () => `/api/v1/webhooks/${id.slice(0, -1)}${encodeEveryByte(id.slice(-1))}`],
    ['an empty segment', () => `/api/v1//webhooks/${id}`],
    ['a trailing slash (an empty last segment)', () => `/api/v1/webhooks/${id}/`],
    ['a trailing slash on a route without an id', () => `/api/v1/webhooks/`],
  ];

  it.each(forms)('refuses %s with 404 ROUTE_NOT_FOUND before any lookup (HTTP/1.1)', async (_name, path) => {
    const answer = await rawHttp1(t.url, http1Request('DELETE', path(), [['Authorization', `Bearer ${tenant.apiKey}`]]));
    const body = JSON.parse(answer.body.toString('utf8')) as { code: string; requestId: string };
    expect({ status: answer.status, code: body.code }).toEqual({ status: 404, code: 'ROUTE_NOT_FOUND' });
    expect(body.requestId).toEqual(answer.headers['x-request-id']?.[0]);
    expect(await endpointDisabled()).toBe(false);
  });

  it.each(forms)('refuses %s with 404 ROUTE_NOT_FOUND before any lookup (HTTP/2)', async (_name, path) => {
    const session = http2.connect(t.url);
    try {
      const answer = await rawH2(session, { ':method': 'DELETE', ':path': path(), authorization: `Bearer ${tenant.apiKey}` }, Buffer.alloc(0));
      const body = JSON.parse(answer.body.toString('utf8')) as { code: string; requestId: string };
      expect({ status: answer.status, code: body.code }).toEqual({ status: 404, code: 'ROUTE_NOT_FOUND' });
      expect(body.requestId).toEqual(answer.headers['x-request-id']);
    } finally {
      session.close();
    }
    expect(await endpointDisabled()).toBe(false);
  });

  it('still routes the canonical path', async () => {
    const answer = await rawHttp1(t.url, http1Request('DELETE', `/api/v1/webhooks/${id}`, [['Authorization', `Bearer ${tenant.apiKey}`]]));
    expect(answer.status).toBe(200);
    expect(await endpointDisabled()).toBe(true);
  });
});
