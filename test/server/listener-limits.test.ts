/**
 * What the listener promises over raw sockets: a client that does not finish asking is
 * closed, and a request received before SIGTERM's shutdown is answered. Each test waits
 * for the socket's 'close' (or the answer); the jest timeout is the only bound on time.
 */
import net from 'node:net';
import http2 from 'node:http2';
import { createListener, type Listener } from '../../src/server/edge/listener';

const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

let listener: Listener;
let port: number;
/** Answers of requests the handler holds until the test releases them, and who waits for one. */
const held: (() => void)[] = [];
let onHeld: (() => void) | null = null;

beforeAll(async () => {
  listener = createListener(
    (req, res) => {
      const answer = () => {
        res.statusCode = 200;
        res.end('ok');
      };
      if (req.headers['x-hold']) {
        held.push(answer);
        onHeld?.();
      } else req.resume().once('end', answer);
    },
    { arrival: { headMs: 300, bodyMs: 300 } },
  );
  await new Promise<void>((resolve) => listener.server.listen(0, '127.0.0.1', resolve));
  port = (listener.server.address() as net.AddressInfo).port;
});
afterAll(async () => {
  await listener.shutdown(1_000);
});

/** Opens a connection, sends `bytes`, and resolves with what came back once the server closes it. */
function sendAndAwaitClose(bytes: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.write(bytes);
  });
}

describe('a client that does not finish asking', () => {
  it('is closed when it sent nothing', async () => {
    expect(await sendAndAwaitClose(Buffer.alloc(0))).toBe('');
  });

  it('is closed when it sent part of the HTTP/2 preface and stalled', async () => {
    expect(await sendAndAwaitClose(H2_PREFACE.subarray(0, 10))).toBe('');
  });

  it('is closed when it sent the whole HTTP/2 preface but no request', async () => {
    await sendAndAwaitClose(H2_PREFACE);
  });

  /** A 408 REQUEST_TIMEOUT refusal with its request id in the body and the header. */
  const REQUEST_TIMEOUT = /^HTTP\/1\.1 408 [^\r]*\r\n[\s\S]*x-request-id: ([0-9a-f-]{36})\r\n[\s\S]*\r\n\r\n\{"code":"REQUEST_TIMEOUT","message":"[^"]+","requestId":"\1"\}$/;

  it('is answered 408 REQUEST_TIMEOUT and closed when its HTTP/1.1 request head stalls', async () => {
    expect(await sendAndAwaitClose(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nX-Slow: '))).toMatch(REQUEST_TIMEOUT);
  });

  it('is answered 408 REQUEST_TIMEOUT and closed when its HTTP/1.1 body stalls', async () => {
    expect(await sendAndAwaitClose(Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{'))).toMatch(REQUEST_TIMEOUT);
  });

  it('has its HTTP/2 stream cancelled when the body stalls', async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', () => undefined);
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/' });
      stream.on('error', () => undefined);
      stream.write('{');
      await new Promise((resolve) => stream.once('close', resolve));
      expect(stream.rstCode).toBe(http2.constants.NGHTTP2_CANCEL);
    } finally {
      session.destroy();
    }
  });
});

it('answers, on shutdown, a request already sent on an accepted connection, and refuses new connections', async () => {
  const own = createListener((req, res) => {
    req.resume();
    res.statusCode = 200;
    res.end('answered');
  });
  await new Promise<void>((resolve) => own.server.listen(0, '127.0.0.1', resolve));
  const ownPort = (own.server.address() as net.AddressInfo).port;
  // Connected and the request written, but not yet read by the server when shutdown begins.
  const accepted = new Promise((resolve) => own.server.once('connection', resolve));
  const socket = net.connect(ownPort, '127.0.0.1');
  await accepted;
  const answer = new Promise<string>((resolve) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
  });
  const shutdown = own.shutdown(5_000);
  socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  expect(await answer).toMatch(/^HTTP\/1\.1 200[\s\S]*connection: close[\s\S]*answered/i);
  await shutdown;
  const refused = await new Promise<string>((resolve) => {
    const late = net.connect(ownPort, '127.0.0.1');
    late.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    late.once('connect', () => resolve('connected'));
  });
  expect(refused).toBe('ECONNREFUSED');
});

it('keeps a held request answered by its handler during shutdown', async () => {
  const holding = new Promise<void>((resolve) => (onHeld = resolve));
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on('error', () => undefined);
  const stream = session.request({ ':path': '/', 'x-hold': '1' });
  const status = new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
  stream.on('error', () => undefined);
  stream.resume();
  stream.end();
  await holding;
  const shutdown = listener.shutdown(5_000);
  held.forEach((answer) => answer());
  expect(await status).toBe(200);
  await shutdown;
  session.destroy();
});
