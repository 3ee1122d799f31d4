/**
 * What Node's HTTP/1.1 parser refuses is answered like every other refusal: the JSON error
 * with its stable code and a request id (body and x-request-id), then the connection is
 * closed. A refused head that follows requests still being answered on the same
 * connection waits for their responses, which arrive whole, before it. Raw sockets only:
 * every client library refuses to send these bytes.
 */
import net from 'node:net';
import { createLogger } from '../../src/config';
import { createListener, type Listener } from '../../src/server/edge/listener';

let listener: Listener;
let port: number;
/** Log lines of the listener, and who waits for one. */
const logged: { msg: string }[] = [];
let onLogged: ((line: { msg: string }) => void) | null = null;
/** Answers the handler holds until the test releases them, and who waits for one. */
const held: (() => void)[] = [];
let onHeld: (() => void) | null = null;

const LARGE = 4 * 1024 * 1024;

beforeAll(async () => {
  const logger = createLogger('debug', {
    write(line: string) {
      const entry = JSON.parse(line) as { msg: string };
      logged.push(entry);
      onLogged?.(entry);
    },
  });
  listener = createListener(
    (req, res) => {
      req.resume();
      req.once('end', () => {
        const answer = (body: string | Buffer) => {
          res.statusCode = 200;
          res.setHeader('content-type', 'text/plain');
          res.end(body);
        };
        if (req.url === '/large') answer(Buffer.alloc(LARGE, 'l'));
        else if (req.url === '/held') {
          held.push(() => answer('held answer'));
          onHeld?.();
        } else answer(`answer to ${req.url}`);
      });
    },
    { logger },
  );
  await new Promise<void>((resolve) => listener.server.listen(0, '127.0.0.1', resolve));
  port = (listener.server.address() as net.AddressInfo).port;
});
afterAll(async () => {
  await listener.shutdown(1_000);
});

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** The responses in what a connection received, in order; what follows the last whole one is `rest`. */
function responsesIn(data: Buffer): { answers: Answer[]; rest: Buffer } {
  const answers: Answer[] = [];
  let rest = data;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) return { answers, rest };
    const [statusLine = '', ...lines] = rest.subarray(0, end).toString('latin1').split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers['content-length'] ?? 0);
    if (rest.length < end + 4 + length) return { answers, rest };
    answers.push({ status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine)?.[1] ?? 0), headers, body: rest.subarray(end + 4, end + 4 + length) });
    rest = rest.subarray(end + 4 + length);
  }
}

/** A connection that collects everything it receives until the server closes it. */
function connection(): { socket: net.Socket; closed: Promise<Buffer>; received: (bytes: number) => Promise<void> } {
  const socket = net.connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  let total = 0;
  let waiter: { bytes: number; resolve: () => void } | null = null;
  socket.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    total += chunk.length;
    if (waiter && total >= waiter.bytes) waiter.resolve();
  });
  socket.on('error', () => undefined);
  const closed = new Promise<Buffer>((resolve) => socket.once('close', () => resolve(Buffer.concat(chunks))));
  const received = (bytes: number) => new Promise<void>((resolve) => (total >= bytes ? resolve() : (waiter = { bytes, resolve })));
  return { socket, closed, received };
}

async function exchange(bytes: string | Buffer): Promise<{ answers: Answer[]; rest: Buffer }> {
  const { socket, closed } = connection();
  socket.write(bytes);
  return responsesIn(await closed);
}

/** The refusal is the service's JSON error with its code, and a request id in body and header. */
function expectRefusal(answer: Answer | undefined, status: number, code: string) {
  expect(answer).toBeDefined();
  const body = JSON.parse(answer!.body.toString('utf8')) as { code: string; message: string; requestId: string };
  expect({ status: answer!.status, code: body.code, connection: answer!.headers.connection, type: answer!.headers['content-type'] }).toEqual({
    status,
    code,
    connection: 'close',
    type: 'application/json',
  });
  expect(body.message).toEqual(expect.any(String));
  expect(body.requestId).toMatch(/^[0-9a-f-]{36}$/);
  expect(answer!.headers['x-request-id']).toBe(body.requestId);
  expect(answer!.headers['x-error-code']).toBe(code);
}

const VALID = 'GET /first HTTP/1.1\r\nHost: x\r\n\r\n';
const MALFORMED = 'GET /second HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n';

describe('a request the HTTP/1.1 parser refuses', () => {
  it('is answered 400 MALFORMED_REQUEST with a request id when its head is malformed', async () => {
    const { answers, rest } = await exchange(MALFORMED);
    expect(answers).toHaveLength(1);
    expectRefusal(answers[0], 400, 'MALFORMED_REQUEST');
    expect(rest.length).toBe(0);
  });

  it.each([
    ['a raw CR LF', 'GET /api/v1/connections?x=\r\nX-Injected: 1 HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a raw LF', 'GET /api/v1/connections?x=\nX-Injected: 1 HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a control character', 'GET /api/v1/conn\u0001ections HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a space', 'GET /api/v1/connections x HTTP/1.1\r\nHost: x\r\n\r\n'],
  ])('is answered 400 MALFORMED_REQUEST when its target holds %s', async (_, request) => {
    const { answers } = await exchange(Buffer.from(request, 'latin1'));
    expect(answers).toHaveLength(1);
    expectRefusal(answers[0], 400, 'MALFORMED_REQUEST');
  });

  it('is answered 431 HEADERS_TOO_LARGE when its head is over 16 KiB', async () => {
    const { answers } = await exchange(`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`);
    expect(answers).toHaveLength(1);
    expectRefusal(answers[0], 431, 'HEADERS_TOO_LARGE');
  });

  it('is answered 400 MALFORMED_REQUEST when its chunked body is broken', async () => {
    const { answers } = await exchange('POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n');
    expect(answers).toHaveLength(1);
    expectRefusal(answers[0], 400, 'MALFORMED_REQUEST');
  });
});

describe('a refused head after a request on the same connection', () => {
  it('is answered after the whole response to the request sent with it', async () => {
    const { answers, rest } = await exchange(VALID + MALFORMED);
    expect(answers).toHaveLength(2);
    expect(answers[0]!.status).toBe(200);
    expect(answers[0]!.body.toString()).toBe('answer to /first');
    expectRefusal(answers[1], 400, 'MALFORMED_REQUEST');
    expect(rest.length).toBe(0);
  });

  it('is answered after a large response that was still being written when it arrived', async () => {
    const { answers, rest } = await exchange(`GET /large HTTP/1.1\r\nHost: x\r\n\r\n${MALFORMED}`);
    expect(answers).toHaveLength(2);
    expect(answers[0]!.status).toBe(200);
    expect(answers[0]!.body.equals(Buffer.alloc(LARGE, 'l'))).toBe(true);
    expectRefusal(answers[1], 400, 'MALFORMED_REQUEST');
    expect(rest.length).toBe(0);
  });

  it('waits for a response still in flight when it arrives, then is answered after it', async () => {
    const { socket, closed } = connection();
    const holding = new Promise<void>((resolve) => (onHeld = resolve));
    socket.write('GET /held HTTP/1.1\r\nHost: x\r\n\r\n');
    await holding;
    const waiting = new Promise<void>((resolve) => (onLogged = (line) => line.msg.includes('waits') && resolve()));
    socket.write(MALFORMED);
    await waiting;
    held.splice(0).forEach((answer) => answer());
    const { answers, rest } = responsesIn(await closed);
    expect(answers).toHaveLength(2);
    expect(answers[0]!.body.toString()).toBe('held answer');
    expectRefusal(answers[1], 400, 'MALFORMED_REQUEST');
    expect(rest.length).toBe(0);
  });

  it('is not answered on a connection the response closed: the response arrives whole, then the close', async () => {
    const { answers, rest } = await exchange(`GET /first HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n${MALFORMED}`);
    expect(answers).toHaveLength(1);
    expect(answers[0]!.body.toString()).toBe('answer to /first');
    expect(rest.length).toBe(0);
  });
});
