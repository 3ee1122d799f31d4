import http from 'node:http';
import { Code, ConnectError, createClient, createRouterTransport } from '@connectrpc/connect';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { createRequestContextInterceptor } from '../../src/server/rpc/request-context';
import { createLogger } from '../../src/config/logger';
import { apiError } from '../../src/errors';
import type { MikroORM } from '../../src/db';
import { ConnectionSchema } from '../../src/db';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { rest } from '../support/clients';
import { connectSandboxAccount } from '../support/connections';

const MAX_BODY_BYTES = 2048;

let t: TestApp;
let tenant: Tenant;
beforeAll(async () => {
  t = await startTestApp({ MAX_BODY_BYTES: String(MAX_BODY_BYTES) });
  tenant = await t.tenant();
});
afterAll(async () => {
  await t.close();
});

function expectError(response: { status: number; body: any; headers: Headers }, status: number, code: string): void {
  expect({ status: response.status, code: response.body?.code }).toEqual({ status, code });
  expect(response.body.message).toEqual(expect.any(String));
  expect(response.body.message).not.toBe('');
  expect(response.headers.get('x-request-id')).toEqual(expect.any(String));
  expect(response.headers.get('x-error-code')).toBe(code);
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
}

/** A request whose body arrives chunked, without a content-length to refuse it up front. */
function chunkedPost(path: string, chunks: Buffer[], apiKey: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, t.url);
    const req = http.request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}`, 'transfer-encoding': 'chunked' } },
      (res) => {
        const received: Buffer[] = [];
        res.on('data', (chunk: Buffer) => received.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(received).toString('utf8')) }));
        res.on('error', reject);
      },
    );
    // The server may answer and close before the whole body is sent; that is the point.
    req.on('error', () => undefined);
    for (const chunk of chunks) req.write(chunk);
    req.end();
  });
}

describe('routing', () => {
  it('answers an unknown route under /api/v1 with 404 ROUTE_NOT_FOUND', async () => {
    expectError(await rest(t.url, 'GET', '/api/v1/nope', { apiKey: tenant.apiKey }), 404, 'ROUTE_NOT_FOUND');
    expectError(await rest(t.url, 'GET', '/api/v1', { apiKey: tenant.apiKey }), 404, 'ROUTE_NOT_FOUND');
    expectError(await rest(t.url, 'POST', '/api/v1/connections/abc/unknown-action', { apiKey: tenant.apiKey, body: {} }), 404, 'ROUTE_NOT_FOUND');
  });

  it('tells a refused HEAD its code and request id in headers, as its answer has no body', async () => {
    const response = await fetch(new URL('/api/v1/nope', t.url), { method: 'HEAD', headers: { authorization: `Bearer ${tenant.apiKey}` } });
    expect({ status: response.status, code: response.headers.get('x-error-code'), body: await response.text() }).toEqual({
      status: 404,
      code: 'ROUTE_NOT_FOUND',
      body: '',
    });
    expect(response.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('answers an unknown path outside /api/v1 with 404 ROUTE_NOT_FOUND', async () => {
    expectError(await rest(t.url, 'GET', '/definitely/not/here'), 404, 'ROUTE_NOT_FOUND');
  });

  it('answers a wrong method with 405 METHOD_NOT_ALLOWED and the allowed methods', async () => {
    const put = await rest(t.url, 'PUT', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: {} });
    expectError(put, 405, 'METHOD_NOT_ALLOWED');
    expect(put.headers.get('allow')?.split(/,\s*/).sort()).toEqual(['GET', 'POST']);

    const del = await rest(t.url, 'DELETE', '/api/v1/connections', { apiKey: tenant.apiKey });
    expectError(del, 405, 'METHOD_NOT_ALLOWED');
    expect(del.headers.get('allow')).toBe('GET');

    const getStart = await rest(t.url, 'GET', '/api/v1/connections/start', { apiKey: tenant.apiKey });
    expectError(getStart, 405, 'METHOD_NOT_ALLOWED');
    expect(getStart.headers.get('allow')).toBe('POST');
  });

  it('answers a path with broken percent-encoding with 404 ROUTE_NOT_FOUND, not an internal error', async () => {
    const response = await rest(t.url, 'POST', '/api/v1/connections/%E0%A4%A/confirm', { apiKey: tenant.apiKey, body: { confirmIdentity: true } });
    expectError(response, 404, 'ROUTE_NOT_FOUND');
  });
});

describe('request bodies', () => {
  const start = (rawBody: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
    rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, rawBody, headers });

  it('refuses malformed JSON with 400 MALFORMED_JSON', async () => {
    expectError(await start('{"toolkit": "instagram"'), 400, 'MALFORMED_JSON');
    expectError(await start("{'toolkit': 'instagram'}"), 400, 'MALFORMED_JSON');
  });

  it('refuses a body that is not UTF-8 with 400 INVALID_UTF8', async () => {
    const invalidUtf8 = Buffer.concat([Buffer.from('{"toolkit": "'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}')]);
    const response = await start(invalidUtf8);
    expectError(response, 400, 'INVALID_UTF8');
    expect(response.body.message).toMatch(/UTF-8/);
  });

  it('refuses a JSON value that is not an object with 400 MALFORMED_JSON', async () => {
    expectError(await start('[{"toolkit": "instagram"}]'), 400, 'MALFORMED_JSON');
    expectError(await start('"instagram"'), 400, 'MALFORMED_JSON');
    expectError(await start('null'), 400, 'MALFORMED_JSON');
  });

  it('refuses fields of the wrong type with 400 INVALID_ARGUMENT', async () => {
    expectError(await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 5 } }), 400, 'INVALID_ARGUMENT');
    const connection = await connectSandboxAccount(t.url, tenant.apiKey, 'facebook', 'page');
    const confirm = await rest(t.url, 'POST', `/api/v1/connections/${connection.id}/confirm`, {
      apiKey: tenant.apiKey,
      body: { confirmIdentity: 'yes' },
    });
    expectError(confirm, 400, 'INVALID_ARGUMENT');
    const row = await t.orm.em.fork().findOneOrFail(ConnectionSchema, { id: connection.id });
    expect(row.status).toBe('connected');
  });

  it('refuses unknown fields with 400 INVALID_ARGUMENT', async () => {
    const response = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram', provider: 'x' } });
    expectError(response, 400, 'INVALID_ARGUMENT');
  });

  it('refuses a body over the limit with 413 PAYLOAD_TOO_LARGE', async () => {
    const oversized = JSON.stringify({ toolkit: 'x'.repeat(MAX_BODY_BYTES) });
    expectError(await start(oversized), 413, 'PAYLOAD_TOO_LARGE');
  });

  it('refuses a chunked body that grows over the limit with 413 PAYLOAD_TOO_LARGE', async () => {
    const chunks = [Buffer.from('{"toolkit":"'), ...Array.from({ length: 5 }, () => Buffer.from('x'.repeat(1024))), Buffer.from('"}')];
    const response = await chunkedPost('/api/v1/connections/start', chunks, tenant.apiKey);
    expect({ status: response.status, code: response.body.code }).toEqual({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
  });

  it('accepts a body just under the limit', async () => {
    const body = JSON.stringify({ toolkit: 'instagram' }).padEnd(MAX_BODY_BYTES - 1, ' ');
    const response = await start(body);
    expect(response.status).toBe(200);
    expect(response.body.redirectUrl).toEqual(expect.any(String));
  });

  it('refuses a body that is not application/json with 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    expectError(await start('toolkit=instagram', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 'UNSUPPORTED_MEDIA_TYPE');
    expectError(await start('{"toolkit":"instagram"}', { 'content-type': 'text/plain' }), 415, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('accepts application/json with a charset parameter', async () => {
    const response = await start('{"toolkit":"instagram"}', { 'content-type': 'application/json; charset=utf-8' });
    expect(response.status).toBe(200);
  });
});

describe('query parameters', () => {
  it('refuses an unknown query parameter with 400 INVALID_ARGUMENT', async () => {
    const response = await rest(t.url, 'GET', '/api/v1/connections?colour=blue', { apiKey: tenant.apiKey });
    expectError(response, 400, 'INVALID_ARGUMENT');
    expect(response.body.message).toContain('colour');
  });

  it('refuses query parameters on a route that takes its request from the body', async () => {
    const response = await rest(t.url, 'POST', '/api/v1/connections/start?toolkit=instagram', { apiKey: tenant.apiKey, body: {} });
    expectError(response, 400, 'INVALID_ARGUMENT');
  });

  it('refuses a number that is not a number with 400 INVALID_ARGUMENT', async () => {
    expectError(await rest(t.url, 'GET', '/api/v1/connections?pageSize=abc', { apiKey: tenant.apiKey }), 400, 'INVALID_ARGUMENT');
  });

  it('refuses a repeated scalar parameter with 400 INVALID_ARGUMENT', async () => {
    expectError(await rest(t.url, 'GET', '/api/v1/connections?pageSize=1&pageSize=2', { apiKey: tenant.apiKey }), 400, 'INVALID_ARGUMENT');
  });

  it('refuses a page token it did not issue with 400 PAGE_TOKEN_INVALID', async () => {
    expectError(await rest(t.url, 'GET', '/api/v1/connections?pageToken=garbage', { apiKey: tenant.apiKey }), 400, 'PAGE_TOKEN_INVALID');
  });
});

describe('internal errors never leak', () => {
  const SECRET = 'password=hunter2 at db-primary.internal:5432';

  function routerClient(thrown: unknown) {
    const orm = { em: { fork: () => ({}) } } as unknown as MikroORM;
    const logger = createLogger('silent');
    const logged = jest.spyOn(logger, 'error');
    const transport = createRouterTransport(
      (router) =>
        router.service(ConnectionService, {
          listConnections() {
            throw thrown;
          },
        }),
      { router: { interceptors: [createRequestContextInterceptor(orm, logger)] } },
    );
    return { connections: createClient(ConnectionService, transport), logged };
  }

  async function failureOf(call: Promise<unknown>): Promise<ConnectError> {
    try {
      await call;
    } catch (error) {
      return ConnectError.from(error);
    }
    throw new Error('expected the call to fail');
  }

  it('turns a plain Error into internal with reason INTERNAL, hiding its message and logging the cause', async () => {
    const { connections, logged } = routerClient(new Error(SECRET));
    const error = await failureOf(connections.listConnections({}));
    expect(error.code).toBe(Code.Internal);
    expect(error.findDetails(ErrorInfoSchema).map((d) => d.reason)).toEqual(['INTERNAL']);
    expect(error.message).not.toContain('hunter2');
    expect(error.message).not.toContain('db-primary');
    const requestId = error.metadata.get('x-request-id');
    expect(requestId).toEqual(expect.any(String));
    expect(error.rawMessage).toContain(requestId);
    expect(logged).toHaveBeenCalledWith(expect.objectContaining({ requestId, err: expect.objectContaining({ message: SECRET }) }), 'internal error');
  });

  it('hides an internal ConnectError that carries no stable code', async () => {
    const { connections } = routerClient(new ConnectError(SECRET, Code.Internal));
    const error = await failureOf(connections.listConnections({}));
    expect(error.code).toBe(Code.Internal);
    expect(error.findDetails(ErrorInfoSchema).map((d) => d.reason)).toEqual(['INTERNAL']);
    expect(error.message).not.toContain('hunter2');
  });

  it('hides a thrown non-Error value', async () => {
    const { connections } = routerClient(SECRET);
    const error = await failureOf(connections.listConnections({}));
    expect(error.code).toBe(Code.Internal);
    expect(error.message).not.toContain('hunter2');
  });

  it('lets a deliberate error with a stable code through unchanged', async () => {
    const { connections, logged } = routerClient(apiError('CONNECTION_NOT_FOUND', 'No connection x in this organization.'));
    const error = await failureOf(connections.listConnections({}));
    expect(error.code).toBe(Code.NotFound);
    expect(error.rawMessage).toBe('No connection x in this organization.');
    expect(error.findDetails(ErrorInfoSchema).map((d) => d.reason)).toEqual(['CONNECTION_NOT_FOUND']);
    expect(logged).not.toHaveBeenCalled();
  });
});
