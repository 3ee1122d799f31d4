/**
 * A client that goes away mid-request (closes its connection, resets its stream) is no
 * fault of the service: it is logged at debug, never at error, on every transport, and
 * the service keeps answering. Each case waits for the line that ends the request's
 * handling (the answer that could not be written), then reads every line it left.
 */
import net from 'node:net';
import http2 from 'node:http2';
import { Writable } from 'node:stream';
import { createClient } from '@connectrpc/connect';
import { createLogger } from '../../src/config/logger';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { transport } from '../support/clients';

interface LogLine {
  level: number;
  msg: string;
  requestId?: string;
}

/** pino's level for error; fatal is above it. */
const ERROR_LEVEL = 50;
/** The line that ends the handling of a request whose client went away. */
const LAST_WORD = 'client went away before its answer was written';

const lines: LogLine[] = [];
const waiting = new Map<string, () => void>();
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const text of chunk.toString('utf8').split('\n').filter(Boolean)) {
      const line = JSON.parse(text) as LogLine;
      lines.push(line);
      if (line.requestId && (line.level >= ERROR_LEVEL || line.msg === LAST_WORD)) waiting.get(line.requestId)?.();
    }
    done();
  },
});

let t: TestApp;
let tenant: Tenant;
beforeAll(async () => {
  t = await startTestApp({}, { logger: createLogger('debug', sink) });
  tenant = await t.tenant();
});
afterAll(async () => {
  await t.close();
});

/** Resolves once the service has finished with the request (or logged an error for it). */
function handled(requestId: string): Promise<void> {
  return new Promise((resolve) => waiting.set(requestId, resolve));
}

const START = `/${ConnectionService.typeName}/StartConnection`;
/** A gRPC envelope announcing 10 bytes, of which one is sent. */
const PART_OF_A_MESSAGE = Buffer.from([0, 0, 0, 0, 10, 0x0a]);

/**
 * HTTP/1.1: sends the head with `Expect: 100-continue`, waits for the server's 100 (it has
 * the request then), sends part of the body, and closes the connection.
 */
function abortOverHttp1(path: string, contentType: string, part: Buffer, requestId: string): Promise<void> {
  const url = new URL(t.url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(url.port), url.hostname);
    socket.on('error', () => undefined);
    socket.once('close', () => resolve());
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: aborts.test\r\nAuthorization: Bearer ${tenant.apiKey}\r\nContent-Type: ${contentType}\r\n` +
        `x-request-id: ${requestId}\r\nContent-Length: ${part.length + 100}\r\nExpect: 100-continue\r\n\r\n`,
    );
    socket.once('data', () => socket.write(part, () => socket.destroy()));
  });
}

/** HTTP/2: sends the head and part of the body, then resets the stream (frames arrive in order). */
function abortOverHttp2(path: string, contentType: string, part: Buffer, requestId: string): Promise<void> {
  return new Promise((resolve) => {
    const session = http2.connect(t.url);
    session.on('error', () => undefined);
    const stream = session.request({ ':method': 'POST', ':path': path, 'content-type': contentType, te: 'trailers', authorization: `Bearer ${tenant.apiKey}`, 'x-request-id': requestId });
    stream.on('error', () => undefined);
    stream.once('close', () => {
      session.close();
      resolve();
    });
    stream.write(part, () => stream.close(http2.constants.NGHTTP2_CANCEL));
  });
}

it.each([
  ['REST over HTTP/1.1', 'gone-rest-h1', (id: string) => abortOverHttp1('/api/v1/connections/start', 'application/json', Buffer.from('{"toolkit":'), id)],
  ['REST over HTTP/2', 'gone-rest-h2', (id: string) => abortOverHttp2('/api/v1/connections/start', 'application/json', Buffer.from('{"toolkit":'), id)],
  ['Connect over HTTP/1.1', 'gone-connect-h1', (id: string) => abortOverHttp1(START, 'application/json', Buffer.from('{"toolkit":'), id)],
  ['Connect over HTTP/2', 'gone-connect-h2', (id: string) => abortOverHttp2(START, 'application/json', Buffer.from('{"toolkit":'), id)],
  ['gRPC', 'gone-grpc', (id: string) => abortOverHttp2(START, 'application/grpc', PART_OF_A_MESSAGE, id)],
  ['gRPC-web', 'gone-grpc-web', (id: string) => abortOverHttp1(START, 'application/grpc-web+proto', PART_OF_A_MESSAGE, id)],
])('logs a client that goes away mid-request over %s at debug, never at error, and keeps answering', async (_name, requestId, abort) => {
  const done = handled(requestId);
  await abort(requestId);
  await done;
  const list = await createClient(ConnectionService, transport(t.url, 'grpc', tenant.apiKey)).listConnections({});
  expect(list.registry.length).toBeGreaterThan(0);

  const left = lines.filter((line) => line.requestId === requestId);
  expect(left.filter((line) => line.level >= ERROR_LEVEL)).toEqual([]);
  expect(left.map((line) => line.msg)).toContain(LAST_WORD);
});

it('left no error-level line at all', () => {
  expect(lines.filter((line) => line.level >= ERROR_LEVEL)).toEqual([]);
});
