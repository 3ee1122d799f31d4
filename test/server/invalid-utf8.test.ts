/**
 * Text is taken as sent or refused: a body or string field that is not valid UTF-8 is
 * refused INVALID_UTF8 on every transport, never stored with U+FFFD in place of what was
 * sent. Raw requests, since every client library encodes strings as valid UTF-8.
 */
import http2 from 'node:http2';
import { create, toBinary, type DescMessage, type MessageInitShape } from '@bufbuild/protobuf';
import { Code } from '@connectrpc/connect';
import { CreateWebhookRequestSchema } from '../../src/gen/publishing/v1/webhook_service_pb';
import { PublishEventRequestSchema } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { errorInfoFromConnectJson, grpcStatusOf, http1Request, rawH2, rawHttp1 } from '../robustness/support';
import { envelope, grpcWebTrailers } from '../support/frames';

const INTERNAL_TOKEN = 'utf8-test-token-0123456789abcdef0123456789';
/** Stands in for the invalid bytes while a body is built, then is replaced by them (same length, so protobuf lengths hold). */
const MARK = Buffer.from('@@');
const INVALID = Buffer.from([0xff, 0xfe]);

let t: TestApp;
let tenant: Tenant;
beforeAll(async () => {
  t = await startTestApp({ INTERNAL_SERVICE_TOKENS: `scheduler:${INTERNAL_TOKEN}` });
  tenant = await t.tenant();
});
afterAll(async () => {
  await t?.close();
});

function withInvalidBytes(bytes: Uint8Array): Buffer {
  const buffer = Buffer.from(bytes);
  const at = buffer.indexOf(MARK);
  if (at < 0) throw new Error('no mark in the body');
  INVALID.copy(buffer, at);
  return buffer;
}

const jsonWithInvalid = (value: unknown) => withInvalidBytes(Buffer.from(JSON.stringify(value)));
const protoWithInvalid = <D extends DescMessage>(schema: D, init: MessageInitShape<D>) => withInvalidBytes(toBinary(schema, create(schema, init)));

type Protocol = 'connect+json' | 'connect+proto' | 'grpc+proto' | 'grpc+json' | 'grpc-web+proto' | 'grpc-web+json';
const PROTOCOLS: Protocol[] = ['connect+json', 'connect+proto', 'grpc+proto', 'grpc+json', 'grpc-web+proto', 'grpc-web+json'];

/** Sends one RPC over `protocol` with `credential`; answers "<gRPC code> <ErrorInfo reason>" and the request id returned. */
async function rpc(protocol: Protocol, path: string, body: Buffer, credential: string): Promise<{ answer: string; requestId: string | undefined }> {
  const authorization = `Bearer ${credential}`;
  if (protocol.startsWith('grpc+')) {
    const session = http2.connect(t.url).on('error', () => undefined);
    try {
      const response = await rawH2(session, { ':method': 'POST', ':path': path, 'content-type': `application/${protocol}`, te: 'trailers', authorization }, envelope(body));
      const status = grpcStatusOf({ ...response.headers, ...response.trailers } as Record<string, string>);
      const requestId = (response.trailers['x-request-id'] ?? response.headers['x-request-id']) as string | undefined;
      return { answer: status === null || status === 'missing' ? String(status) : `${Code[status.code]} ${status.info?.reason ?? ''}`, requestId };
    } finally {
      session.close();
    }
  }
  if (protocol.startsWith('grpc-web+')) {
    const response = await rawHttp1(t.url, http1Request('POST', path, [['Content-Type', `application/${protocol}`], ['Authorization', authorization], ['X-Grpc-Web', '1']], envelope(body)));
    const trailers = grpcWebTrailers(response.body);
    const flat = Object.fromEntries(Object.entries(response.headers).map(([n, v]) => [n, v[0] ?? '']));
    const status = grpcStatusOf({ ...flat, ...trailers });
    return { answer: status === null || status === 'missing' ? String(status) : `${Code[status.code]} ${status.info?.reason ?? ''}`, requestId: trailers['x-request-id'] ?? flat['x-request-id'] };
  }
  const contentType = protocol === 'connect+json' ? 'application/json' : 'application/proto';
  const response = await rawHttp1(t.url, http1Request('POST', path, [['Content-Type', contentType], ['Authorization', authorization], ['Connect-Protocol-Version', '1']], body));
  const parsed = JSON.parse(response.body.toString('utf8') || '{}') as { code?: string; details?: { type?: string; value?: string }[] };
  return { answer: `HTTP ${response.status} ${parsed.code ?? ''} ${errorInfoFromConnectJson(parsed)?.reason ?? ''}`, requestId: response.headers['x-request-id']?.[0] };
}

const expectedRefusal = (protocol: Protocol) => (protocol.startsWith('connect') ? 'HTTP 400 invalid_argument INVALID_UTF8' : 'InvalidArgument INVALID_UTF8');

async function endpointCount(): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from webhook_endpoints where organization_id = ?', [tenant.organizationId]);
  return row!.n;
}

async function eventCount(): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from events where organization_id = ?', [tenant.organizationId]);
  return row!.n;
}

async function restAnswer(method: string, target: string, body?: Buffer): Promise<{ status: number; code: string; requestId: string | undefined; header: string | undefined }> {
  const headers: [string, string][] = [['Authorization', `Bearer ${tenant.apiKey}`]];
  if (body) headers.push(['Content-Type', 'application/json']);
  const response = await rawHttp1(t.url, http1Request(method, target, headers, body));
  const parsed = JSON.parse(response.body.toString('utf8')) as { code: string; requestId: string };
  expect(parsed.requestId).toBe(response.headers['x-request-id']?.[0]);
  return { status: response.status, code: parsed.code, requestId: parsed.requestId, header: response.headers['x-error-code']?.[0] };
}

describe('a webhook URL that is not valid UTF-8', () => {
  it('is refused over REST with 400 INVALID_UTF8, and no endpoint is stored', async () => {
    const answer = await restAnswer('POST', '/api/v1/webhooks', jsonWithInvalid({ url: 'https://hooks.example.com/@@in' }));
    expect(answer).toMatchObject({ status: 400, code: 'INVALID_UTF8', header: 'INVALID_UTF8' });
    expect(await endpointCount()).toBe(0);
  });

  it.each(PROTOCOLS)('is refused over %s with invalid_argument INVALID_UTF8, and no endpoint is stored', async (protocol) => {
    const body = protocol.endsWith('+json') ? jsonWithInvalid({ url: 'https://hooks.example.com/@@in' }) : protoWithInvalid(CreateWebhookRequestSchema, { url: 'https://hooks.example.com/@@in' });
    const { answer, requestId } = await rpc(protocol, '/publishing.v1.WebhookService/CreateWebhook', body, tenant.apiKey);
    expect(answer.trim()).toBe(expectedRefusal(protocol));
    expect(requestId).toBeTruthy();
    expect(await endpointCount()).toBe(0);
  });

  it('is refused in an event name (a repeated string field) too', async () => {
    const body = protoWithInvalid(CreateWebhookRequestSchema, { url: 'https://hooks.example.com/in', eventNames: ['webhook.test', 'order.@@'] });
    expect((await rpc('grpc+proto', '/publishing.v1.WebhookService/CreateWebhook', body, tenant.apiKey)).answer).toBe('InvalidArgument INVALID_UTF8');
    expect(await endpointCount()).toBe(0);
  });
});

describe('text without a UTF-8 form or sent beside the body', () => {
  it('refuses a lone surrogate escaped in JSON (it has no UTF-8 form) over REST and Connect', async () => {
    const body = Buffer.from('{"url":"https://hooks.example.com/\\ud800in"}');
    expect(await restAnswer('POST', '/api/v1/webhooks', body)).toMatchObject({ status: 400, code: 'INVALID_UTF8' });
    expect((await rpc('connect+json', '/publishing.v1.WebhookService/CreateWebhook', body, tenant.apiKey)).answer.trim()).toBe('HTTP 400 invalid_argument INVALID_UTF8');
    expect(await endpointCount()).toBe(0);
  });

  it('refuses a lone surrogate in an event payload (free-form JSON) over Connect and gRPC, recording no event', async () => {
    const body = Buffer.from(`{"organizationId":"${tenant.organizationId}","eventId":"order-surrogate","eventType":"order.shipped","payload":{"note":"\\udc00"}}`);
    expect((await rpc('connect+json', '/publishing.internal.v1.EventService/PublishEvent', body, INTERNAL_TOKEN)).answer.trim()).toBe('HTTP 400 invalid_argument INVALID_UTF8');
    expect((await rpc('grpc+json', '/publishing.internal.v1.EventService/PublishEvent', body, INTERNAL_TOKEN)).answer).toBe('InvalidArgument INVALID_UTF8');
    expect(await eventCount()).toBe(0);
  });

  it('refuses a REST query parameter whose percent-encoded bytes are not UTF-8', async () => {
    expect(await restAnswer('GET', '/api/v1/webhooks?pageToken=%ff%fe')).toMatchObject({ status: 400, code: 'INVALID_UTF8' });
    // A % that starts no escape is the character itself, as before: the token is only invalid.
    expect(await restAnswer('GET', '/api/v1/webhooks?pageToken=%zz')).toMatchObject({ status: 400, code: 'PAGE_TOKEN_INVALID' });
  });

  it('still takes valid UTF-8 beyond ASCII as sent', async () => {
    const other = await t.tenant();
    const body = Buffer.from(JSON.stringify({ url: 'https://hooks.example.com/in', description: 'Bäckerei – 東京 🍞' }));
    const response = await rawHttp1(t.url, http1Request('POST', '/api/v1/webhooks', [['Authorization', `Bearer ${other.apiKey}`], ['Content-Type', 'application/json']], body));
    expect(response.status).toBe(200);
    const rows = await t.orm.em.fork().execute<{ description: string }[]>('select description from webhook_endpoints where organization_id = ?', [other.organizationId]);
    expect(rows).toEqual([{ description: 'Bäckerei – 東京 🍞' }]);
  });
});

describe('an event whose payload holds text that is not valid UTF-8', () => {
  it.each(PROTOCOLS)('is refused over %s with invalid_argument INVALID_UTF8, and no event is recorded', async (protocol) => {
    const init = { organizationId: tenant.organizationId, eventId: `order-${protocol}`, eventType: 'order.shipped', payload: { note: 'fresh @@' } };
    const body = protocol.endsWith('+json') ? jsonWithInvalid(init) : protoWithInvalid(PublishEventRequestSchema, init);
    const { answer } = await rpc(protocol, '/publishing.internal.v1.EventService/PublishEvent', body, INTERNAL_TOKEN);
    expect(answer.trim()).toBe(expectedRefusal(protocol));
    expect(await eventCount()).toBe(0);
  });
});
