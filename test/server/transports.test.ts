import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import { create, fromBinary, toBinary, toJson } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { ConnectionService, ListConnectionsRequestSchema, ListConnectionsResponseSchema } from '../../src/gen/publishing/v1/connection_service_pb';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { envelope } from '../support/frames';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest, type TransportName } from '../support/clients';
import { connectSandboxAccount } from '../support/connections';

const RPC_TRANSPORTS: TransportName[] = ['grpc', 'connect', 'grpc-web'];

let t: TestApp;
let tenant: Tenant;
beforeAll(async () => {
  t = await startTestApp();
  tenant = await t.tenant();
  await connectSandboxAccount(t.url, tenant.apiKey, 'instagram', 'bakery');
  await connectSandboxAccount(t.url, tenant.apiKey, 'youtube', 'channel');
});
afterAll(async () => {
  await t.close();
});

/** The rejection of a call as a ConnectError, with the stable code of its ErrorInfo. */
async function failureOf(call: Promise<unknown>): Promise<{ code: Code; reason: string | undefined; metadata: Record<string, string>; message: string }> {
  try {
    await call;
  } catch (error) {
    const connectError = ConnectError.from(error);
    const [info] = connectError.findDetails(ErrorInfoSchema);
    return { code: connectError.code, reason: info?.reason, metadata: info?.metadata ?? {}, message: connectError.rawMessage };
  }
  throw new Error('the call succeeded but a failure was expected');
}

describe('the same RPC over every transport', () => {
  it('lists the same connections over gRPC, Connect, gRPC-web and REST', async () => {
    const viaRest = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    expect(viaRest.status).toBe(200);
    expect(viaRest.body.connections).toHaveLength(2);
    expect(viaRest.body.connections.map((c: { toolkit: string }) => c.toolkit).sort()).toEqual(['instagram', 'youtube']);
    expect(viaRest.body.connectableToolkits).toEqual(expect.arrayContaining(['instagram', 'youtube']));

    for (const name of RPC_TRANSPORTS) {
      const response = await client(ConnectionService, t.url, name, tenant.apiKey).listConnections({});
      expect({ transport: name, json: toJson(ListConnectionsResponseSchema, response) }).toEqual({ transport: name, json: viaRest.body });
    }
  });

  it('passes REST query parameters through as request fields', async () => {
    const viaRest = await rest(t.url, 'GET', '/api/v1/connections?pageSize=1', { apiKey: tenant.apiKey });
    expect(viaRest.status).toBe(200);
    expect(viaRest.body.connections).toHaveLength(1);
    expect(viaRest.body.nextPageToken).toEqual(expect.any(String));

    const viaGrpc = await client(ConnectionService, t.url, 'grpc', tenant.apiKey).listConnections({ pageSize: 1 });
    expect(toJson(ListConnectionsResponseSchema, viaGrpc)).toEqual(viaRest.body);
  });
});

describe('the same failure gives the same code everywhere', () => {
  it('refuses a gated toolkit with CAPABILITY_UNSUPPORTED (REST 422, gRPC FailedPrecondition)', async () => {
    const viaRest = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'tiktok' } });
    expect(viaRest.status).toBe(422);
    expect(viaRest.body).toMatchObject({ code: 'CAPABILITY_UNSUPPORTED', message: expect.stringContaining('TikTok'), details: { toolkit: 'tiktok', status: 'gated' } });
    expect(viaRest.headers.get('x-request-id')).toEqual(expect.any(String));

    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(ConnectionService, t.url, name, tenant.apiKey).startConnection({ toolkit: 'tiktok' }));
      expect({ transport: name, ...failure }).toMatchObject({
        transport: name,
        code: Code.FailedPrecondition,
        reason: 'CAPABILITY_UNSUPPORTED',
        metadata: { toolkit: 'tiktok', status: 'gated' },
        message: viaRest.body.message,
      });
    }
  });

  it('refuses a toolkit missing from the registry with CAPABILITY_UNSUPPORTED', async () => {
    const viaRest = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'mastodon' } });
    expect(viaRest).toMatchObject({ status: 422, body: { code: 'CAPABILITY_UNSUPPORTED', details: { status: 'not_in_registry' } } });
    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(ConnectionService, t.url, name, tenant.apiKey).startConnection({ toolkit: 'mastodon' }));
      expect({ transport: name, code: failure.code, reason: failure.reason }).toEqual({
        transport: name,
        code: Code.FailedPrecondition,
        reason: 'CAPABILITY_UNSUPPORTED',
      });
    }
  });

  it('refuses a call without a key with AUTHENTICATION_REQUIRED (401 / Unauthenticated)', async () => {
    const viaRest = await rest(t.url, 'GET', '/api/v1/connections');
    expect(viaRest).toMatchObject({ status: 401, body: { code: 'AUTHENTICATION_REQUIRED', message: expect.any(String) } });
    expect(viaRest.headers.get('x-request-id')).toEqual(expect.any(String));

    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(ConnectionService, t.url, name).listConnections({}));
      expect({ transport: name, code: failure.code, reason: failure.reason }).toEqual({
        transport: name,
        code: Code.Unauthenticated,
        reason: 'AUTHENTICATION_REQUIRED',
      });
    }
  });

  it('refuses a key without connections:manage with SCOPE_MISSING (403 / PermissionDenied)', async () => {
    const reader = await tenant.colleague('owner', ['connections:read']);
    const viaRest = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: reader.apiKey, body: { toolkit: 'instagram' } });
    expect(viaRest).toMatchObject({ status: 403, body: { code: 'SCOPE_MISSING', message: expect.any(String), details: { scope: 'connections:manage' } } });
    expect(viaRest.headers.get('x-request-id')).toEqual(expect.any(String));

    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(ConnectionService, t.url, name, reader.apiKey).startConnection({ toolkit: 'instagram' }));
      expect({ transport: name, ...failure }).toMatchObject({
        transport: name,
        code: Code.PermissionDenied,
        reason: 'SCOPE_MISSING',
        metadata: { scope: 'connections:manage' },
      });
    }
  });

  it('gives every REST error a code, a message and an x-request-id that matches the body', async () => {
    const failures = [
      await rest(t.url, 'GET', '/api/v1/connections'),
      await rest(t.url, 'GET', '/api/v1/nothing-here', { apiKey: tenant.apiKey }),
      await rest(t.url, 'DELETE', '/api/v1/connections', { apiKey: tenant.apiKey }),
      await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, rawBody: '{', headers: { 'content-type': 'application/json' } }),
      await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'tiktok' } }),
      await rest(t.url, 'POST', '/api/v1/connections/00000000-0000-4000-8000-000000000000/disable', { apiKey: tenant.apiKey, body: { reason: 'x' } }),
    ];
    for (const failure of failures) {
      expect(failure.status).toBeGreaterThanOrEqual(400);
      expect(failure.body).toEqual(expect.objectContaining({ code: expect.stringMatching(/^[A-Z_]+$/), message: expect.any(String) }));
      expect(failure.body.message).not.toBe('');
      const requestId = failure.headers.get('x-request-id');
      expect(requestId).toEqual(expect.any(String));
      expect(failure.body.requestId).toBe(requestId);
    }
  });

  it('carries the request id on gRPC errors as well', async () => {
    try {
      await client(ConnectionService, t.url, 'grpc').listConnections({});
      throw new Error('expected a failure');
    } catch (error) {
      const connectError = ConnectError.from(error);
      expect(connectError.code).toBe(Code.Unauthenticated);
      expect(connectError.metadata.get('x-request-id')).toEqual(expect.any(String));
    }
  });
});

describe('compression', () => {
  // Four destinations: an answer past connect-es's default threshold for compressing (1 KiB).
  let wide: Tenant;
  beforeAll(async () => {
    wide = await t.tenant();
    for (const [toolkit, account] of [['instagram', 'creator'], ['youtube', 'channel2'], ['facebook', 'page2'], ['linkedin', 'member2']] as const) {
      await connectSandboxAccount(t.url, wide.apiKey, toolkit, account);
    }
  });

  /** One call on its own HTTP/2 session: the answer's headers, body and trailers. */
  async function h2Call(headers: http2.OutgoingHttpHeaders, body: Buffer): Promise<{ headers: http2.IncomingHttpHeaders; body: Buffer; trailers: http2.IncomingHttpHeaders }> {
    const session = http2.connect(t.url);
    try {
      return await new Promise((resolve, reject) => {
        const stream = session.request({ ':method': 'POST', ':path': '/publishing.v1.ConnectionService/ListConnections', authorization: `Bearer ${wide.apiKey}`, ...headers });
        const chunks: Buffer[] = [];
        let answerHeaders: http2.IncomingHttpHeaders = {};
        let trailers: http2.IncomingHttpHeaders = {};
        stream.on('response', (h) => (answerHeaders = h));
        stream.on('trailers', (h) => (trailers = h));
        stream.on('data', (chunk: Buffer) => chunks.push(chunk));
        stream.on('end', () => resolve({ headers: answerHeaders, body: Buffer.concat(chunks), trailers }));
        stream.on('error', reject);
        stream.end(body);
      });
    } finally {
      session.close();
    }
  }

  // Callers are internal services on the same network: an answer's gzip costs more CPU than it saves on the wire.
  it('reads a gzip-compressed gRPC request and answers uncompressed to a caller that accepts gzip', async () => {
    const request = gzipSync(toBinary(ListConnectionsRequestSchema, create(ListConnectionsRequestSchema, { pageSize: 10 })));
    const answer = await h2Call({ 'content-type': 'application/grpc', te: 'trailers', 'grpc-encoding': 'gzip', 'grpc-accept-encoding': 'gzip' }, envelope(request, 1));
    expect(answer.trailers['grpc-status'] ?? answer.headers['grpc-status']).toBe('0');
    // One frame, flag 0 (not compressed).
    expect(answer.body.readUInt8(0)).toBe(0);
    const length = answer.body.readUInt32BE(1);
    expect({ length, frame: answer.body.length }).toEqual({ length: expect.any(Number), frame: length + 5 });
    expect(length).toBeGreaterThan(1024);
    const message = fromBinary(ListConnectionsResponseSchema, answer.body.subarray(5));
    expect(message.connections.map((c) => c.toolkit).sort()).toEqual(['facebook', 'instagram', 'linkedin', 'youtube']);
  });

  it('reads a gzip-compressed Connect request and answers uncompressed to a caller that accepts gzip', async () => {
    const answer = await h2Call({ 'content-type': 'application/json', 'content-encoding': 'gzip', 'accept-encoding': 'gzip', 'connect-protocol-version': '1' }, gzipSync('{"pageSize":10}'));
    expect(answer.headers[':status']).toBe(200);
    expect(answer.headers['content-encoding']).toBeUndefined();
    expect(answer.body.length).toBeGreaterThan(1024);
    const json = JSON.parse(answer.body.toString('utf8')) as { connections: { toolkit: string }[] };
    expect(json.connections.map((c) => c.toolkit).sort()).toEqual(['facebook', 'instagram', 'linkedin', 'youtube']);
  });
});
