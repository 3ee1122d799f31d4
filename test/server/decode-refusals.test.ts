/**
 * Bodies the protocol layer cannot decode are refused as the client's fault on every
 * transport, with a stable code and the request id; the caller is authenticated before
 * any body is decoded; and an audited action refused for its body is in the audit trail,
 * on every transport, before the refusal is answered.
 */
import http from 'node:http';
import http2 from 'node:http2';
import { Code } from '@connectrpc/connect';
import { createLogger } from '../../src/config';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { errorInfoFromConnectJson, grpcStatusOf, http1Request, rawH2, rawHttp1 } from '../robustness/support';
import { envelope, grpcWebTrailers } from '../support/frames';

let t: TestApp;
let tenant: Tenant;
/** Who waits for a log line of the service. */
const logWaiters = new Set<(line: { msg?: string; requestId?: string; code?: string }) => void>();
beforeAll(async () => {
  const logger = createLogger('info', {
    write(line: string) {
      const entry = JSON.parse(line) as { msg?: string; requestId?: string; code?: string };
      for (const waiter of logWaiters) waiter(entry);
    },
  });
  t = await startTestApp({}, { logger });
  tenant = await t.tenant();
});
afterAll(async () => {
  await t.close();
});

const CONFIRM = `/${ConnectionService.typeName}/ConfirmConnection`;
/** Field 0 does not exist: "parse binary: illegal tag: field no 0 wire type 0". */
const UNDECODABLE = Buffer.from([0x00, 0x00, 0x07]);

type Answer = { code: string; reason: string | undefined; requestId: string | undefined; message: string };

async function connectCall(contentType: string, body: Buffer, requestId: string, apiKey: string | null): Promise<Answer & { status: number }> {
  const headers: [string, string][] = [['Content-Type', contentType], ['x-request-id', requestId]];
  if (apiKey) headers.push(['Authorization', `Bearer ${apiKey}`]);
  const answer = await rawHttp1(t.url, http1Request('POST', CONFIRM, headers, body));
  if (answer.incomplete) throw new Error(`no answer: ${answer.error ?? 'incomplete'}`);
  const parsed = JSON.parse(answer.body.toString('utf8')) as { code: string; message: string; details?: { type?: string; value?: string }[] };
  return { status: answer.status, code: parsed.code, reason: errorInfoFromConnectJson(parsed)?.reason, requestId: answer.headers['x-request-id']?.[0], message: parsed.message };
}

async function grpcCall(body: Buffer, requestId: string, apiKey: string | null, contentType = 'application/grpc'): Promise<Answer> {
  const session = http2.connect(t.url);
  try {
    const headers: http2.OutgoingHttpHeaders = { ':method': 'POST', ':path': CONFIRM, 'content-type': contentType, te: 'trailers', 'x-request-id': requestId };
    if (apiKey) headers.authorization = `Bearer ${apiKey}`;
    const answer = await rawH2(session, headers, body);
    const fields = { ...answer.headers, ...answer.trailers } as Record<string, string>;
    const status = grpcStatusOf(fields);
    if (status === null || status === 'missing') throw new Error(`no refusal: ${String(status)}`);
    return { code: Code[status.code]!, reason: status.info?.reason, requestId: fields['x-request-id'], message: status.message };
  } finally {
    session.close();
  }
}

async function grpcWebCall(body: Buffer, requestId: string, apiKey: string | null, contentType = 'application/grpc-web+proto'): Promise<Answer> {
  const headers: [string, string][] = [['Content-Type', contentType], ['x-request-id', requestId]];
  if (apiKey) headers.push(['Authorization', `Bearer ${apiKey}`]);
  const answer = await rawHttp1(t.url, http1Request('POST', CONFIRM, headers, body));
  const flat = Object.fromEntries(Object.entries(answer.headers).map(([n, v]) => [n, v[0] ?? '']));
  const fields = { ...flat, ...grpcWebTrailers(answer.body) };
  const status = grpcStatusOf(fields);
  if (status === null || status === 'missing') throw new Error(`no refusal: ${String(status)}`);
  return { code: Code[status.code]!, reason: status.info?.reason, requestId: fields['x-request-id'], message: status.message };
}

describe('a body the protocol layer cannot decode', () => {
  it('is refused 400 invalid_argument with INVALID_ARGUMENT and the request id over Connect binary, without the parser message', async () => {
    const answer = await connectCall('application/proto', UNDECODABLE, 'bad-proto-connect', tenant.apiKey);
    expect(answer).toMatchObject({ status: 400, code: 'invalid_argument', reason: 'INVALID_ARGUMENT', requestId: 'bad-proto-connect' });
    expect(answer.message).not.toMatch(/parse binary|illegal tag/);
  });

  it('is refused InvalidArgument with INVALID_ARGUMENT and the request id over gRPC and gRPC-web', async () => {
    expect(await grpcCall(envelope(UNDECODABLE), 'bad-proto-grpc', tenant.apiKey)).toMatchObject({ code: 'InvalidArgument', reason: 'INVALID_ARGUMENT', requestId: 'bad-proto-grpc' });
    expect(await grpcWebCall(envelope(UNDECODABLE), 'bad-proto-web', tenant.apiKey)).toMatchObject({ code: 'InvalidArgument', reason: 'INVALID_ARGUMENT', requestId: 'bad-proto-web' });
  });

  it('is refused with a code, not unimplemented, when the unary message is missing or compressed without an encoding', async () => {
    expect(await grpcCall(Buffer.alloc(0), 'no-message', tenant.apiKey)).toMatchObject({ code: 'InvalidArgument', reason: 'INVALID_ARGUMENT', requestId: 'no-message' });
    expect(await grpcCall(envelope(UNDECODABLE, 1), 'flagged', tenant.apiKey)).toMatchObject({ code: 'InvalidArgument', reason: 'INVALID_ARGUMENT', requestId: 'flagged' });
  });

  it('is refused with invalid_argument over Connect JSON when the JSON is malformed', async () => {
    expect(await connectCall('application/json', Buffer.from('{"id":'), 'bad-json', tenant.apiKey)).toMatchObject({ status: 400, reason: 'INVALID_ARGUMENT', requestId: 'bad-json' });
  });
});

describe('authentication before decoding', () => {
  it('answers an unauthenticated call with an undecodable body 401 on every transport', async () => {
    expect(await connectCall('application/proto', UNDECODABLE, 'anon-proto', null)).toMatchObject({ status: 401, reason: 'AUTHENTICATION_REQUIRED', requestId: 'anon-proto' });
    expect(await connectCall('application/json', Buffer.from('{nope'), 'anon-json', null)).toMatchObject({ status: 401, reason: 'AUTHENTICATION_REQUIRED', requestId: 'anon-json' });
    expect(await grpcCall(envelope(UNDECODABLE), 'anon-grpc', null)).toMatchObject({ code: 'Unauthenticated', reason: 'AUTHENTICATION_REQUIRED', requestId: 'anon-grpc' });
    expect(await grpcWebCall(envelope(UNDECODABLE), 'anon-web', 'pk_live_unknown')).toMatchObject({ code: 'Unauthenticated', reason: 'API_KEY_INVALID', requestId: 'anon-web' });
    const rest = await rawHttp1(t.url, http1Request('POST', '/api/v1/connections/start', [['Content-Type', 'application/json']], Buffer.from('{"toolkit":')));
    expect({ status: rest.status, code: (JSON.parse(rest.body.toString('utf8')) as { code: string }).code }).toEqual({ status: 401, code: 'AUTHENTICATION_REQUIRED' });
  });
});

async function auditEvents(requestId: string) {
  return t.orm.em.fork().execute<{ action: string; outcome: string; reason: string; organization_id: string }[]>(
    'select action, outcome, reason, organization_id from audit_events where request_id = ?',
    [requestId],
  );
}

/** A body whose field has the wrong type: confirmIdentity is a bool. */
const WRONGLY_TYPED = Buffer.from('{"id":"00000000-0000-4000-8000-000000000000","confirmIdentity":"true"}');

describe('an audited action refused for its body sent directly over Connect, gRPC and gRPC-web', () => {
  it.each([
    ['Connect binary, undecodable', (id: string) => connectCall('application/proto', UNDECODABLE, id, tenant.apiKey)],
    ['Connect JSON, wrongly typed', (id: string) => connectCall('application/json', WRONGLY_TYPED, id, tenant.apiKey)],
    ['Connect JSON, not JSON', (id: string) => connectCall('application/json', Buffer.from('{"confirmIdentity":tru'), id, tenant.apiKey)],
    ['gRPC, undecodable', (id: string) => grpcCall(envelope(UNDECODABLE), id, tenant.apiKey)],
    ['gRPC JSON, wrongly typed', (id: string) => grpcCall(envelope(WRONGLY_TYPED), id, tenant.apiKey, 'application/grpc+json')],
    ['gRPC-web, undecodable', (id: string) => grpcWebCall(envelope(UNDECODABLE), id, tenant.apiKey)],
    ['gRPC-web JSON, wrongly typed', (id: string) => grpcWebCall(envelope(WRONGLY_TYPED), id, tenant.apiKey, 'application/grpc-web+json')],
  ])('leaves exactly one refused audit event, stored before the answer, for %s', async (name, call) => {
    const requestId = `direct-${name.replace(/[^a-z]+/gi, '-').toLowerCase()}`;
    const answer = await call(requestId);
    expect(answer).toMatchObject({ reason: 'INVALID_ARGUMENT', requestId });
    expect(await auditEvents(requestId)).toEqual([{ action: 'connection.confirm', outcome: 'refused', reason: 'INVALID_ARGUMENT', organization_id: tenant.organizationId }]);
  });

  it('leaves no audit event for a caller refused before its body was read', async () => {
    expect(await grpcCall(envelope(UNDECODABLE), 'direct-anonymous', null)).toMatchObject({ reason: 'AUTHENTICATION_REQUIRED', requestId: 'direct-anonymous' });
    expect(await auditEvents('direct-anonymous')).toEqual([]);
  });
});

describe('an audited action refused for its body over REST', () => {
  const refusedEvents = auditEvents;

  it.each([
    ['a wrongly typed field', '{"confirmIdentity":"true"}', 'INVALID_ARGUMENT'],
    ['malformed JSON', '{"confirmIdentity":tru', 'MALFORMED_JSON'],
  ])('leaves a refused audit event for %s', async (_name, body, code) => {
    const requestId = `audited-${code.toLowerCase()}`;
    const answer = await rawHttp1(
      t.url,
      http1Request('POST', '/api/v1/connections/00000000-0000-4000-8000-000000000000/confirm', [['Authorization', `Bearer ${tenant.apiKey}`], ['Content-Type', 'application/json'], ['x-request-id', requestId]], Buffer.from(body)),
    );
    const parsed = JSON.parse(answer.body.toString('utf8')) as { code: string; requestId: string };
    expect({ status: answer.status, code: parsed.code, requestId: parsed.requestId }).toEqual({ status: 400, code, requestId });
    expect(await refusedEvents(requestId)).toEqual([{ action: 'connection.confirm', outcome: 'refused', reason: code, organization_id: tenant.organizationId }]);
  });
});

describe('a request to an RPC path that no protocol takes', () => {
  async function refusal(method: string, path: string, headers: [string, string][], requestId: string) {
    const answer = await rawHttp1(t.url, http1Request(method, path, [...headers, ['x-request-id', requestId]], method === 'GET' ? undefined : Buffer.from('{}')));
    const body = JSON.parse(answer.body.toString('utf8')) as { code: string; requestId: string };
    return { status: answer.status, code: body.code, requestId: body.requestId, header: answer.headers['x-request-id']?.[0], allow: answer.headers['allow']?.[0] };
  }

  it('answers a content type none of the protocols speaks 415 UNSUPPORTED_MEDIA_TYPE with the request id', async () => {
    expect(await refusal('POST', CONFIRM, [['Content-Type', 'text/plain']], 'no-protocol-415')).toMatchObject({ status: 415, code: 'UNSUPPORTED_MEDIA_TYPE', requestId: 'no-protocol-415', header: 'no-protocol-415' });
  });

  it('answers a method the RPC does not allow 405 METHOD_NOT_ALLOWED with Allow and the request id', async () => {
    expect(await refusal('GET', `${CONFIRM}?connect=v1&encoding=json&message={}`, [], 'no-protocol-405')).toMatchObject({ status: 405, code: 'METHOD_NOT_ALLOWED', requestId: 'no-protocol-405', allow: 'POST' });
  });

  it('answers a bidirectional stream over HTTP/1.1 400 INVALID_ARGUMENT, not 505', async () => {
    const reflection = '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo';
    expect(await refusal('POST', reflection, [['Content-Type', 'application/grpc-web+proto']], 'no-protocol-505')).toMatchObject({ status: 400, code: 'INVALID_ARGUMENT', requestId: 'no-protocol-505' });
  });
});

/** Resolves once the service has refused the call `requestId` for its passed deadline, its body still unread. */
function deadlinePassed(requestId: string): Promise<void> {
  return new Promise((resolve) => {
    const waiter = (line: { msg?: string; requestId?: string; code?: string }) => {
      if (line.requestId !== requestId || line.code !== 'DEADLINE_EXCEEDED' || line.msg !== 'call refused before decoding') return;
      logWaiters.delete(waiter);
      resolve();
    };
    logWaiters.add(waiter);
  });
}

/** An HTTP/1.1 call whose head goes out at once and whose body only once its deadline has passed. */
async function http1CallBodyAfterDeadline(headers: Record<string, string>, body: Buffer, requestId: string): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  const passed = deadlinePassed(requestId);
  const url = new URL(t.url);
  const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: CONFIRM, headers: { ...headers, 'x-request-id': requestId, authorization: `Bearer ${tenant.apiKey}`, 'content-length': String(body.length) } });
  const answer = new Promise<{ status: number; headers: Record<string, string>; body: Buffer }>((resolve, reject) => {
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: Object.fromEntries(Object.entries(res.headers).map(([n, v]) => [n, String(v)])), body: Buffer.concat(chunks) }));
    });
    req.once('error', reject);
  });
  req.flushHeaders();
  await passed;
  req.end(body);
  return answer;
}

describe('a call whose own deadline passes while its body is read, and whose body then cannot be decoded', () => {
  // The caller's key is looked up once beforehand, so the gate is through long before the deadline.
  beforeAll(async () => {
    await grpcCall(envelope(UNDECODABLE), 'deadline-warm-up', tenant.apiKey);
  });

  it('is refused DeadlineExceeded with DEADLINE_EXCEEDED and the request id over gRPC', async () => {
    const requestId = 'deadline-then-bad-body-grpc';
    const passed = deadlinePassed(requestId);
    const session = http2.connect(t.url);
    try {
      const stream = session.request({
        ':method': 'POST', ':path': CONFIRM, 'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '200m', 'x-request-id': requestId, authorization: `Bearer ${tenant.apiKey}`,
      });
      const fields: Record<string, string> = {};
      const closed = new Promise<void>((resolve) => stream.once('close', resolve));
      stream.on('response', (headers) => Object.assign(fields, headers));
      stream.on('trailers', (trailers) => Object.assign(fields, trailers));
      stream.on('error', () => undefined);
      stream.resume();
      await passed;
      stream.end(envelope(UNDECODABLE));
      await closed;
      const status = grpcStatusOf(fields);
      if (status === null || status === 'missing') throw new Error(`no refusal: ${String(status)}`);
      expect({ code: Code[status.code], reason: status.info?.reason, requestId: fields['x-request-id'] }).toEqual({ code: 'DeadlineExceeded', reason: 'DEADLINE_EXCEEDED', requestId });
    } finally {
      session.close();
    }
  });

  it('is refused DeadlineExceeded with DEADLINE_EXCEEDED and the request id over gRPC-web', async () => {
    const requestId = 'deadline-then-bad-body-web';
    const answer = await http1CallBodyAfterDeadline({ 'content-type': 'application/grpc-web+proto', 'grpc-timeout': '200m' }, envelope(UNDECODABLE), requestId);
    const status = grpcStatusOf({ ...answer.headers, ...grpcWebTrailers(answer.body) });
    if (status === null || status === 'missing') throw new Error(`no refusal: ${String(status)}`);
    expect({ code: Code[status.code], reason: status.info?.reason, requestId: grpcWebTrailers(answer.body)['x-request-id'] ?? answer.headers['x-request-id'] }).toEqual({
      code: 'DeadlineExceeded',
      reason: 'DEADLINE_EXCEEDED',
      requestId,
    });
  });

  it('is refused deadline_exceeded with DEADLINE_EXCEEDED and the request id over Connect', async () => {
    const requestId = 'deadline-then-bad-body-connect';
    const answer = await http1CallBodyAfterDeadline({ 'content-type': 'application/proto', 'connect-timeout-ms': '200' }, UNDECODABLE, requestId);
    const parsed = JSON.parse(answer.body.toString('utf8')) as { code: string; details?: { type?: string; value?: string }[] };
    // The Connect protocol carries deadline_exceeded as HTTP 504, the catalog's status for DEADLINE_EXCEEDED.
    expect({ status: answer.status, code: parsed.code, reason: errorInfoFromConnectJson(parsed)?.reason, requestId: answer.headers['x-request-id'] }).toEqual({
      status: 504,
      code: 'deadline_exceeded',
      reason: 'DEADLINE_EXCEEDED',
      requestId,
    });
  });
});
