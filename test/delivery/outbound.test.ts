import { createOutboundClient, OutboundError, type OutboundOptions } from '../../src/outbound';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { makeTestTls, type TestTls } from '../support/tls';

const LOOPBACK = ['127.0.0.0/8', '::1/128'];
const BODY = JSON.stringify({ type: 'webhook.test', id: 'evt_1' });

let tls: TestTls;
let receiver: HttpsReceiver | undefined;

beforeAll(async () => {
  tls = await makeTestTls();
});

afterEach(async () => {
  await receiver?.close();
  receiver = undefined;
});

async function receive(respond: (index: number) => ReceiverAction): Promise<HttpsReceiver> {
  receiver = await startHttpsReceiver({ tls, respond });
  return receiver;
}

function client(overrides: Partial<OutboundOptions> = {}) {
  return createOutboundClient({
    allowCidrs: LOOPBACK,
    extraCa: tls.caPem,
    timeoutMs: 2000,
    maxResponseBytes: 1024,
    ...overrides,
  });
}

async function failure(promise: Promise<unknown>): Promise<OutboundError> {
  const err = await promise.then(
    () => {
      throw new Error('expected the request to fail');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OutboundError);
  return err as OutboundError;
}

describe('outbound client against a real HTTPS receiver on loopback', () => {
  it('returns the status and body of a 200 and sends the body and headers unchanged', async () => {
    const r = await receive(() => ({ status: 200, body: 'ok thanks' }));
    const res = await client().post(`${r.url}/hooks/a?x=1`, { 'content-type': 'application/json', 'x-service-timestamp': '1' }, BODY);

    expect(res).toEqual({ status: 200, body: Buffer.from('ok thanks'), truncated: false });
    expect(r.requests).toHaveLength(1);
    expect(r.requests[0]).toMatchObject({ method: 'POST', path: '/hooks/a?x=1', rawBody: BODY });
    expect(r.requests[0]!.headers).toMatchObject({ 'content-type': 'application/json', 'x-service-timestamp': '1' });
  });

  it('returns a 500 as a status, not as an error', async () => {
    const r = await receive(() => ({ status: 500, body: 'boom' }));
    const res = await client().post(r.url, {}, BODY);
    expect(res.status).toBe(500);
    expect(res.body.toString()).toBe('boom');
  });

  it('returns a 302 as its status and never follows the Location', async () => {
    const r = await receive(() => ({ status: 302, headers: { location: '/elsewhere' } }));
    const res = await client().post(`${r.url}/hook`, {}, BODY);

    expect(res.status).toBe(302);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(r.requests.map((q) => q.path)).toEqual(['/hook']);
  });

  it('fails with timeout when the endpoint never answers', async () => {
    const r = await receive(() => 'hang');
    const started = Date.now();
    const err = await failure(client({ timeoutMs: 300 }).post(r.url, {}, BODY));

    expect(err.kind).toBe('timeout');
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('fails with timeout when the response drips slower than the deadline allows', async () => {
    const r = await receive(() => ({ drip: { bytes: 100, intervalMs: 50 } }));
    const err = await failure(client({ timeoutMs: 400 }).post(r.url, {}, BODY));
    expect(err.kind).toBe('timeout');
  });

  it('fails with connection when the endpoint resets the connection', async () => {
    const r = await receive(() => 'reset');
    const err = await failure(client().post(r.url, {}, BODY));
    expect(err.kind).toBe('connection');
  });

  it('fails with tls when the certificate is signed by a CA it was not given', async () => {
    const r = await receive(() => ({ status: 200 }));
    const err = await failure(client({ extraCa: undefined }).post(r.url, {}, BODY));

    expect(err.kind).toBe('tls');
    expect(r.requests).toHaveLength(0);
  });

  it('keeps at most maxResponseBytes of the body and marks it truncated', async () => {
    const r = await receive(() => ({ status: 200, body: 'x'.repeat(200_000) }));
    const res = await client({ maxResponseBytes: 1000 }).post(r.url, {}, BODY);

    expect(res.status).toBe(200);
    expect(res.body.length).toBe(1000);
    expect(res.truncated).toBe(true);
  });

  it('does not mark a body of exactly maxResponseBytes as truncated', async () => {
    const r = await receive(() => ({ status: 200, body: 'y'.repeat(1000) }));
    const res = await client({ maxResponseBytes: 1000 }).post(r.url, {}, BODY);
    expect(res).toMatchObject({ truncated: false });
    expect(res.body.length).toBe(1000);
  });

  it('refuses an http:// URL with invalid_url', async () => {
    const r = await receive(() => ({ status: 200 }));
    const err = await failure(client().post(r.url.replace('https:', 'http:'), {}, BODY));

    expect(err.kind).toBe('invalid_url');
    expect(r.requests).toHaveLength(0);
  });

  it('refuses a string that is not a URL with invalid_url', async () => {
    const err = await failure(client().post('not a url', {}, BODY));
    expect(err.kind).toBe('invalid_url');
  });

  it('refuses loopback with blocked_address when it is not allow-listed, and sends nothing', async () => {
    const r = await receive(() => ({ status: 200 }));
    const err = await failure(client({ allowCidrs: [] }).post(r.url, {}, BODY));

    expect(err.kind).toBe('blocked_address');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(r.requests).toHaveLength(0);
  });

  it('resolves a host name through the lookup filter and verifies the certificate against that name', async () => {
    const r = await receive(() => ({ status: 204 }));
    const port = new URL(r.url).port;
    const lookup = jest.fn(async () => [{ address: '127.0.0.1', family: 4 as const }]);
    const res = await client({ lookup }).post(`https://localhost:${port}/hook`, {}, BODY);

    expect(res.status).toBe(204);
    expect(lookup).toHaveBeenCalledWith('localhost');
    expect(r.requests).toHaveLength(1);
  });

  it('fails with dns when the name does not resolve', async () => {
    const lookup = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.example'), { code: 'ENOTFOUND' });
    };
    const err = await failure(client({ lookup }).post('https://nowhere.example/hook', {}, BODY));
    expect(err).toMatchObject({ kind: 'dns', code: 'ENOTFOUND' });
  });

  it('keeps secrets, headers, body and path out of the error message', async () => {
    const r = await receive(() => 'reset');
    const err = await failure(
      client().post(`${r.url}/hook?token=path-secret`, { authorization: 'Bearer header-secret' }, '{"secret":"body-secret"}'),
    );
    expect(err.message).not.toMatch(/secret/);
  });
});
