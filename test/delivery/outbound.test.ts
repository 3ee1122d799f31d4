import https from 'node:https';
import type { AddressInfo } from 'node:net';
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

    // The post is over once it resolves: a redirect it followed would have been requested before.
    expect(res.status).toBe(302);
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

    // Refused when the address was resolved, before any connection was opened.
    expect(err).toMatchObject({ kind: 'blocked_address', dispatched: false });
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

/** `endless`: 200 with a long body that never ends. */
type PooledAction = 'ok' | 'endless' | 'hang' | 'reset';

/**
 * A receiver that counts TLS handshakes and connections closed, to see from the other end
 * which connections the client opened, reused and dropped.
 */
interface CountingReceiver {
  port: number;
  handshakes: number;
  requests: number;
  /** Resolves once `n` of its connections have closed. */
  closedConnections(n: number): Promise<void>;
  close(): Promise<void>;
}

let counting: CountingReceiver | undefined;

afterEach(async () => {
  await counting?.close();
  counting = undefined;
});

async function countingReceiver(respond: (index: number) => PooledAction = () => 'ok'): Promise<CountingReceiver> {
  let closed = 0;
  const waiters = new Set<() => void>();
  const server = https.createServer({ key: tls.keyPem, cert: tls.certPem }, (req, res) => {
    req.resume();
    req.on('end', () => {
      const action = respond(state.requests++);
      if (action === 'hang') return;
      if (action === 'reset') return req.socket.destroy();
      if (action === 'endless') {
        res.writeHead(200, { 'content-length': '1000000' });
        res.write('x'.repeat(100_000));
        return;
      }
      res.writeHead(200, { 'content-length': '2' });
      res.end('ok');
    });
  });
  server.on('secureConnection', (socket) => {
    state.handshakes++;
    socket.on('close', () => {
      closed++;
      for (const wake of waiters) wake();
    });
  });
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const state: CountingReceiver = {
    port: (server.address() as AddressInfo).port,
    handshakes: 0,
    requests: 0,
    closedConnections: (n) =>
      new Promise((resolve) => {
        const wake = () => {
          if (closed < n) return;
          waiters.delete(wake);
          resolve();
        };
        waiters.add(wake);
        wake();
      }),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  counting = state;
  return state;
}

describe('outbound connections are reused per receiver', () => {
  const at = (r: CountingReceiver) => `https://127.0.0.1:${r.port}/hook`;

  it('sends sequential posts to one receiver over one TLS connection', async () => {
    const r = await countingReceiver();
    const outbound = client();
    for (let i = 0; i < 5; i++) expect((await outbound.post(at(r), {}, BODY)).status).toBe(200);

    expect(r.requests).toBe(5);
    expect(r.handshakes).toBe(1);
  });

  it('still refuses a new connection once the name resolves to a private address, while the pooled one serves', async () => {
    const r = await countingReceiver();
    let address = '127.0.0.1';
    const outbound = client({ allowCidrs: ['127.0.0.0/8'], lookup: async () => [{ address, family: 4 as const }] });
    const url = `https://localhost:${r.port}/hook`;
    await outbound.post(url, {}, BODY);

    address = '10.0.0.7';
    // The first takes the one pooled connection; the second needs a new one and dials through the filter.
    const [reused, fresh] = await Promise.allSettled([outbound.post(url, {}, BODY), outbound.post(url, {}, BODY)]);

    expect(reused).toMatchObject({ status: 'fulfilled', value: { status: 200 } });
    expect(fresh).toMatchObject({ status: 'rejected', reason: { kind: 'blocked_address', code: 'private', dispatched: false } });
    expect(r.requests).toBe(2);
    expect(r.handshakes).toBe(1);
  });

  it('closes a connection past its maximum age instead of reusing it, and dials anew', async () => {
    const r = await countingReceiver();
    const lookup = jest.fn(async () => [{ address: '127.0.0.1', family: 4 as const }]);
    const outbound = client({ connectionMaxAgeMs: 200, lookup });
    const url = `https://localhost:${r.port}/hook`;
    // The pool ages connections by performance.now(): move that clock on rather than wait.
    const realNow = performance.now.bind(performance);
    let later = 0;
    const clock = jest.spyOn(performance, 'now').mockImplementation(() => realNow() + later);
    try {
      await outbound.post(url, {}, BODY);
      later = 250;
      await outbound.post(url, {}, BODY);
    } finally {
      clock.mockRestore();
    }

    await r.closedConnections(1);
    expect(r.handshakes).toBe(2);
    expect(lookup).toHaveBeenCalledTimes(2);
  });

  it('calls beforeSend once per post on a reused connection, before the request is written', async () => {
    const r = await countingReceiver();
    const outbound = client();
    const seenByReceiver: number[] = [];
    const beforeSend = jest.fn(async () => {
      seenByReceiver.push(r.requests);
      return true;
    });
    for (let i = 0; i < 3; i++) await outbound.post(at(r), {}, BODY, { beforeSend });

    expect(beforeSend).toHaveBeenCalledTimes(3);
    expect(seenByReceiver).toEqual([0, 1, 2]);
    expect(r.handshakes).toBe(1);
  });

  it('sends a post that waited for a busy connection once that connection is free', async () => {
    const r = await receive(() => ({ status: 200 }));
    // One connection for two posts: the second is handed the first's connection when it frees,
    // a pooled connection that will not report a TLS handshake again.
    const c = client({ connectionsPerEndpoint: 1 });
    const slowBeforeSend = async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return true;
    };
    const answers = await Promise.all([1, 2].map((n) => c.post(`${r.url}/wait/${n}`, {}, BODY, { beforeSend: slowBeforeSend })));
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    expect(r.requests.map((q) => q.path).sort()).toEqual(['/wait/1', '/wait/2']);
  });

  it('starts the deadline when a post has its connection: a receiver answering within it never times out, however many wait', async () => {
    // Each answer takes 60 % of the deadline; four posts share one connection, so the last
    // waits for three answers (180 % of the deadline) before its own request leaves.
    const r = await receive(() => ({ status: 200, delayMs: 300 }));
    const c = client({ connectionsPerEndpoint: 1, timeoutMs: 500 });
    const answers = await Promise.all([1, 2, 3, 4].map((n) => c.post(`${r.url}/queued/${n}`, {}, BODY)));

    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(r.requests.map((q) => q.path).sort()).toEqual(['/queued/1', '/queued/2', '/queued/3', '/queued/4']);
  });

  it('sends nothing when beforeSend refuses on a reused connection, and the next post still arrives', async () => {
    const r = await countingReceiver();
    const outbound = client();
    await outbound.post(at(r), {}, BODY);
    const err = await failure(outbound.post(at(r), {}, BODY, { beforeSend: async () => false }));
    const res = await outbound.post(at(r), {}, BODY);

    expect(err).toMatchObject({ kind: 'not_sent', dispatched: false });
    expect(res.status).toBe(200);
    expect(r.requests).toBe(2);
  });

  it('closes a connection whose response was cut at the cap instead of pooling it', async () => {
    const r = await countingReceiver((index) => (index === 0 ? 'endless' : 'ok'));
    const outbound = client({ maxResponseBytes: 1000 });
    expect(await outbound.post(at(r), {}, BODY)).toMatchObject({ truncated: true });
    await r.closedConnections(1);
    expect(await outbound.post(at(r), {}, BODY)).toMatchObject({ status: 200, truncated: false });
    expect(r.handshakes).toBe(2);
  });

  it.each([
    ['a deadline', 'hang', 'timeout'],
    ['a reset', 'reset', 'connection'],
  ] as const)('does not pool a connection that ended in %s: the next post gets a new one', async (_name, action, kind) => {
    const r = await countingReceiver((index) => (index === 1 ? action : 'ok'));
    const outbound = client({ timeoutMs: 500 });
    await outbound.post(at(r), {}, BODY);
    const err = await failure(outbound.post(at(r), {}, BODY));
    const res = await outbound.post(at(r), {}, BODY);

    expect(err).toMatchObject({ kind, dispatched: true });
    expect(res.status).toBe(200);
    expect(r.requests).toBe(3);
    expect(r.handshakes).toBe(2);
  });

  it('does not pool a connection whose attempt was cancelled', async () => {
    let secondArrived!: () => void;
    const arrived = new Promise<void>((resolve) => (secondArrived = resolve));
    const r = await countingReceiver((index) => (index === 1 ? (secondArrived(), 'hang') : 'ok'));
    const outbound = client();
    await outbound.post(at(r), {}, BODY);
    const controller = new AbortController();
    const cancelled = failure(outbound.post(at(r), {}, BODY, { signal: controller.signal }));
    await arrived;
    controller.abort();
    expect(await cancelled).toMatchObject({ kind: 'aborted' });
    expect((await outbound.post(at(r), {}, BODY)).status).toBe(200);
    expect(r.handshakes).toBe(2);
  });
});
