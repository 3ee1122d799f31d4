import http2 from 'node:http2';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus } from '../../src/gen/grpc/health/v1/health_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { createListener } from '../../src/server/edge/listener';
import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

describe('one listener for every protocol', () => {
  it('answers /healthz and /readyz over HTTP/1.1', async () => {
    expect(await rest(t.url, 'GET', '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  });

  it('answers the standard gRPC health check over h2c on the same port', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.url }));
    expect((await health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: 'publishing.v1.WebhookService' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    await expect(health.check({ service: 'nope.Service' })).rejects.toMatchObject({ code: 5 });
  });

  it('serves REST over HTTP/2 cleartext as well', async () => {
    const session = http2.connect(t.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = session.request({ ':path': '/healthz' });
      req.on('response', (headers) => resolve(Number(headers[':status'])));
      req.on('error', reject);
      // Read to its end: an unread answer keeps the stream, and so the connection, open.
      req.resume();
      req.end();
    });
    session.close();
    expect(status).toBe(200);
  });
});

// Node's HTTP/2 client (grpc-js and connect-node use it) keeps the unsent part of a body the
// server refused without reading counted against its 10 MiB session budget, and then refuses
// every new stream on that connection with ENHANCE_YOUR_CALM. Five 2 MiB refusals are enough.
describe('refusing a request body it did not read', () => {
  const REFUSALS = 12;
  const TWO_MIB = Buffer.alloc(2 * 1024 * 1024, 'a');

  function h2Call(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: Buffer) {
    return new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request(headers, { endStream: !body });
      const chunks: Buffer[] = [];
      let status = 0;
      stream.on('response', (h) => (status = Number(h[':status'])));
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => resolve({ status, body: Buffer.concat(chunks).toString('utf8') }));
      stream.on('error', reject);
      if (body) stream.end(body);
    });
  }

  it('keeps the HTTP/2 connection usable for REST (413, 404 and 405 refusals)', async () => {
    const { apiKey } = await t.tenant();
    const session = http2.connect(t.url);
    try {
      const answers: string[] = [];
      for (let i = 0; i < REFUSALS; i++) {
        const [method, path] = [['POST', '/api/v1/webhooks'], ['POST', '/api/v1/nope'], ['PUT', '/api/v1/webhooks']][i % 3]!;
        const headers = { ':method': method, ':path': path, 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
        const answer = await h2Call(session, headers, TWO_MIB);
        answers.push(`${answer.status} ${(JSON.parse(answer.body) as { code: string }).code}`);
      }
      expect(answers).toEqual(Array.from({ length: REFUSALS }, (_, i) => ['413 PAYLOAD_TOO_LARGE', '404 ROUTE_NOT_FOUND', '405 METHOD_NOT_ALLOWED'][i % 3]));
      const list = await h2Call(session, { ':path': '/api/v1/webhooks', authorization: `Bearer ${apiKey}` });
      expect(list.status).toBe(200);
    } finally {
      session.close();
    }
  });

  it('keeps the gRPC connection usable after refusing oversized messages', async () => {
    const { apiKey } = await t.tenant();
    const webhooks = client(WebhookService, t.url, 'grpc', apiKey);
    const codes: Code[] = [];
    for (let i = 0; i < REFUSALS; i++) {
      const refusal = await webhooks.createWebhook({ url: `https://example.com/${'a'.repeat(TWO_MIB.length)}` }).catch((error: unknown) => error);
      codes.push(ConnectError.from(refusal).code);
    }
    expect(codes).toEqual(Array.from({ length: REFUSALS }, () => Code.ResourceExhausted));
    expect((await webhooks.listWebhooks({})).endpoints).toEqual([]);
  });

  it('keeps the gRPC connection usable after refusing large unauthenticated calls before reading their bodies', async () => {
    const webhooks = client(WebhookService, t.url, 'grpc');
    const codes: Code[] = [];
    for (let i = 0; i < REFUSALS; i++) {
      const refusal = await webhooks.createWebhook({ url: `https://example.com/${'a'.repeat(TWO_MIB.length / 2)}` }).catch((error: unknown) => error);
      codes.push(ConnectError.from(refusal).code);
    }
    expect(codes).toEqual(Array.from({ length: REFUSALS }, () => Code.Unauthenticated));
  });

  it('closes a refused stream whose client stops sending without ending it, and cancels one that goes on past 64 MiB', async () => {
    const { apiKey } = await t.tenant();
    const session = http2.connect(t.url);
    try {
      // Read part way (past the 1 MiB limit), answered 413; the client then goes quiet without ending its side.
      const idle = session.request({ ':method': 'POST', ':path': '/api/v1/webhooks', 'content-type': 'application/json', authorization: `Bearer ${apiKey}` });
      let idleStatus = 0;
      idle.on('response', (h) => (idleStatus = Number(h[':status'])));
      idle.resume();
      idle.write(Buffer.alloc(1536 * 1024, 'a'));
      const closed = await Promise.race([
        new Promise((resolve) => idle.once('close', () => resolve('closed'))),
        new Promise((resolve) => setTimeout(() => resolve('still open after 5 s'), 5_000)),
      ]);
      expect({ closed, status: idleStatus, rstCode: idle.rstCode }).toEqual({ closed: 'closed', status: 413, rstCode: http2.constants.NGHTTP2_NO_ERROR });

      // A body that never ends: answered, read and dropped up to the limit, then cancelled.
      const endless = session.request({ ':method': 'POST', ':path': '/api/v1/nope', 'content-type': 'application/json' });
      let endlessStatus = 0;
      endless.on('response', (h) => (endlessStatus = Number(h[':status'])));
      endless.on('error', () => undefined);
      endless.resume();
      const chunk = Buffer.alloc(1024 * 1024, 'a');
      let sent = 0;
      while (!endless.closed && sent < 128 * chunk.length) {
        await new Promise<void>((resolve) => endless.write(chunk, () => resolve()));
        sent += chunk.length;
      }
      await new Promise((resolve) => (endless.closed ? resolve(undefined) : endless.once('close', resolve)));
      expect({ status: endlessStatus, rstCode: endless.rstCode }).toEqual({ status: 404, rstCode: http2.constants.NGHTTP2_CANCEL });
      expect(sent).toBeGreaterThan(64 * chunk.length);
      expect(sent).toBeLessThan(128 * chunk.length);
    } finally {
      session.close();
    }
  });

  it('cancels a refused stream whose client keeps trickling bytes past the time bound', async () => {
    const listener = createListener(
      (_req, res) => {
        res.statusCode = 404;
        res.end();
      },
      { discard: { totalMs: 500 } },
    );
    await new Promise<void>((resolve) => listener.server.listen(0, '127.0.0.1', resolve));
    const { port } = listener.server.address() as { port: number };
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const trickle = session.request({ ':method': 'POST', ':path': '/' });
      let status = 0;
      trickle.on('response', (h) => (status = Number(h[':status'])));
      trickle.on('error', () => undefined);
      trickle.resume();
      const started = Date.now();
      // A kilobyte every 100 ms: never idle for the 1 s idle bound, so only the time bound ends it.
      while (!trickle.closed && Date.now() - started < 5_000) {
        trickle.write(Buffer.alloc(1024, 'a'));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect({ closed: trickle.closed, status, rstCode: trickle.rstCode }).toEqual({ closed: true, status: 404, rstCode: http2.constants.NGHTTP2_CANCEL });
      expect(Date.now() - started).toBeLessThan(2_000);
    } finally {
      session.close();
      await listener.shutdown(1_000);
    }
  });
});
