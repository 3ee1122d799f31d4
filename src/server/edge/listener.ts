import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { Duplex } from 'node:stream';
import type { Logger } from '../../config';
import { ParserRefusals } from './parser-refusals';

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

export interface Listener {
  server: net.Server;
  /** Stops accepting, lets in-flight requests finish (up to `graceMs`), then closes every connection. */
  shutdown(graceMs: number): Promise<void>;
}

const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** Bounds on reading and dropping an HTTP/2 request body its answer did not need. */
export interface DiscardLimits {
  /** Bytes read and dropped before the stream is cancelled. */
  bytes: number;
  /** How long the client may send nothing before the stream is closed. */
  idleMs: number;
  /** How long the stream may stay open after its answer, however the client sends. */
  totalMs: number;
}

const DISCARD_LIMITS: DiscardLimits = { bytes: 64 * 1024 * 1024, idleMs: 1_000, totalMs: 30_000 };

/** How long a client may take to say what it wants, and to send it. */
export interface ArrivalLimits {
  /** From accept to a complete HTTP/2 preface or HTTP/1.1 request head, and to an HTTP/2 connection's first request head. */
  headMs: number;
  /** From a request's head to the end of its body. */
  bodyMs: number;
}

const ARRIVAL_LIMITS: ArrivalLimits = { headMs: 10_000, bodyMs: 30_000 };

/** How often Node's HTTP/1.1 server checks its header and request deadlines; the bounds are this late at most. */
const H1_CHECK_INTERVAL_MS = 1_000;

/**
 * One port for every protocol. `http2.createServer({allowHTTP1: true})` cannot accept
 * cleartext HTTP/1.1, so each connection's first bytes decide: the HTTP/2 preface goes
 * to the h2c server (gRPC, Connect over h2), anything else to the HTTP/1.1 server
 * (REST, Connect, gRPC-web).
 *
 * No connection is held open by a client that does not finish asking: one that has not
 * completed its preface or first request head within `headMs` is closed, whatever it
 * sent, and a request body not complete `bodyMs` after its head is cut off (HTTP/1.1:
 * 408 REQUEST_TIMEOUT; HTTP/2: the stream is cancelled). What Node's HTTP/1.1 parser
 * refuses is answered with a coded error too (see ParserRefusals).
 */
export function createListener(
  handler: RequestHandler,
  options: { discard?: Partial<DiscardLimits>; arrival?: Partial<ArrivalLimits>; logger?: Logger } = {},
): Listener {
  const discard = { ...DISCARD_LIMITS, ...options.discard };
  const arrival = { ...ARRIVAL_LIMITS, ...options.arrival };
  let closing = false;
  /** HTTP/1.1 connections that have had a request, and those with one in progress. */
  const served = new WeakSet<object>();
  const busy = new Map<object, number>();
  const refusals = new ParserRefusals(options.logger);
  const tracked: RequestHandler = (req, res) => {
    const socket = req.socket;
    served.add(socket);
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    res.once('close', () => {
      const left = (busy.get(socket) ?? 1) - 1;
      if (left === 0) busy.delete(socket);
      else busy.set(socket, left);
    });
    if (req instanceof http2.Http2ServerRequest) {
      bodyDeadline(req, arrival.bodyMs);
      discardUnreadBody(req, discard);
    } else {
      refusals.track(req, res as http.ServerResponse);
      if (refusals.refusesVersionless(req, res as http.ServerResponse)) return;
      // Answered, then closed: shutdown does not wait for this connection's next request.
      if (closing) res.setHeader('connection', 'close');
    }
    handler(req, res);
  };

  const h1 = http.createServer(
    {
      // Longer than the idle timeout of common clients (Node's agent and undici: 4–5 s; load
      // balancers: 60 s): a server that closes an idle connection first races the client's
      // next request on it, which the client then sees as ECONNRESET.
      keepAliveTimeout: 65_000,
      headersTimeout: arrival.headMs,
      requestTimeout: arrival.headMs + arrival.bodyMs,
      connectionsCheckingInterval: Math.min(H1_CHECK_INTERVAL_MS, arrival.headMs),
    },
    tracked,
  );
  h1.on('clientError', refusals.refuse);
  const h2 = http2.createServer({}, tracked);
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on('session', (session) => {
    sessions.add(session);
    // A closed session ends only its side of the socket; a client that keeps its side open must not hold shutdown.
    session.once('close', () => session.socket?.destroy());
    session.once('close', () => sessions.delete(session));
    // A connection that completed the preface but never sends a request head is not kept.
    const firstHead = setTimeout(() => session.destroy(), arrival.headMs);
    session.once('stream', () => clearTimeout(firstHead));
    session.once('close', () => clearTimeout(firstHead));
  });
  // Node arms its HTTP/1.1 header and request deadlines when a server starts listening;
  // this one never listens (connections are handed to it), so it is told it does.
  h1.emit('listening');
  const sockets = new Set<net.Socket>();
  let allClosed: (() => void) | null = null;

  // Without noDelay, Nagle holds back the last pieces of each HTTP/2 response for tens of ms.
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      if (sockets.size === 0) allClosed?.();
    });
    let seen = Buffer.alloc(0);
    const sniff = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      const compared = Math.min(seen.length, H2_PREFACE.length);
      const isH2 = seen.subarray(0, compared).equals(H2_PREFACE.subarray(0, compared));
      if (isH2 && seen.length < H2_PREFACE.length) return;
      socket.off('data', sniff);
      clearTimeout(prefaceDeadline);
      if (isH2) {
        h2.emit('connection', new ReplayedSocket(socket, seen));
      } else {
        socket.pause();
        socket.unshift(seen);
        h1.emit('connection', socket);
        socket.resume();
      }
    };
    socket.on('data', sniff);
    socket.on('error', () => socket.destroy());
    // A connection that has not said which protocol it speaks in time is not kept open,
    // however many bytes of the HTTP/2 preface it sent.
    const prefaceDeadline = setTimeout(() => socket.destroy(), arrival.headMs);
    socket.once('close', () => clearTimeout(prefaceDeadline));
  });

  return {
    server,
    /**
     * New connections are refused at once. A connection accepted before may still carry
     * a request the kernel already holds: it is read and answered (with `Connection:
     * close` on HTTP/1.1; HTTP/2 gets GOAWAY, which lets streams already sent finish),
     * within the arrival limits. Only HTTP/1.1 connections idle after a request are closed
     * at once, as Node's server does. Whatever is still open after `graceMs` is destroyed.
     */
    async shutdown(graceMs) {
      closing = true;
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      options.logger?.info({ connections: sockets.size }, 'stopped accepting connections; answering those accepted');
      for (const socket of sockets) if (served.has(socket) && !busy.has(socket)) socket.destroy();
      for (const session of sessions) session.close();
      if (sockets.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((resolve) => (allClosed = resolve)),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs).unref())),
        ]);
        clearTimeout(timer);
      }
      h1.closeAllConnections();
      // Disarms the deadline checks armed above; it reports "not running", which it never was.
      h1.close(() => undefined);
      for (const session of sessions) session.destroy();
      for (const socket of sockets) socket.destroy();
      await stopped;
    },
  };
}

/**
 * Whether the client closed its connection or reset its stream before the answer was
 * complete: what fails after that (reading the body, writing the answer) is the client
 * leaving, not the service failing.
 */
export function clientWentAway(req: Parameters<RequestHandler>[0], res: Parameters<RequestHandler>[1]): boolean {
  if (res.writableEnded) return false;
  // Node's HTTP/1.1 response is destroyed when its connection closes before it ended.
  return req instanceof http2.Http2ServerRequest ? req.stream.destroyed : res.destroyed;
}

/** Cancels an HTTP/2 request whose body has not ended `ms` after its head. */
function bodyDeadline(req: http2.Http2ServerRequest, ms: number) {
  const stream = req.stream;
  if (stream.endAfterHeaders) return;
  let ended = false;
  const deadline = setTimeout(() => {
    if (!ended && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
  }, ms);
  req.once('end', () => {
    ended = true;
    clearTimeout(deadline);
  });
  stream.once('close', () => clearTimeout(deadline));
}

/**
 * A request answered before its body was read (413, an unknown route, an oversized gRPC
 * message) is closed by Node's HTTP/2 server with RST_STREAM(NO_ERROR), as RFC 9113 §8.1
 * allows, or, if the handler stopped reading part way, left open with the client blocked
 * on flow control. Node's own HTTP/2 client (so grpc-js and connect-node too) never gives
 * the unsent bytes back to its session memory budget in either case: after about 10 MiB
 * of refused bodies on one connection it refuses every new stream with ENHANCE_YOUR_CALM.
 *
 * So once the answer is sent, the rest of the body is read and dropped, as Node's
 * HTTP/1.1 server does. The stream then ends with the client's END_STREAM; with
 * RST_STREAM(NO_ERROR) when the client sends nothing for `idleMs` (connect-node stops
 * writing without ending its side once it has its answer); or with RST_STREAM(CANCEL)
 * past `bytes` or `totalMs`, so a client cannot hold a stream open by trickling.
 *
 * This has to start on the stream's own 'finish': that is when Node decides whether to
 * reset a stream nobody is reading.
 */
function discardUnreadBody(req: http2.Http2ServerRequest, limits: DiscardLimits) {
  const stream = req.stream;
  stream.once('finish', () => {
    if (stream.readableEnded || stream.destroyed) return;
    // The request may already be destroyed by a handler that stopped reading; it takes no more data.
    stream.removeAllListeners('data');
    let discarded = 0;
    stream.on('data', (chunk: Buffer) => {
      discarded += chunk.length;
      if (discarded > limits.bytes) stream.close(http2.constants.NGHTTP2_CANCEL);
    });
    stream.setTimeout(limits.idleMs, () => stream.close(http2.constants.NGHTTP2_NO_ERROR));
    const cutOff = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), limits.totalMs);
    stream.once('close', () => clearTimeout(cutOff));
    stream.resume();
  });
}

/**
 * The sniffed bytes are gone from the kernel buffer, and the HTTP/2 server reads a
 * native socket's handle directly, so `unshift` cannot give them back. A stream that
 * replays them and then relays the socket works: http2 wraps any non-native stream.
 */
class ReplayedSocket extends Duplex {
  constructor(
    private readonly socket: net.Socket,
    head: Buffer,
  ) {
    super();
    this.push(head);
    socket.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) socket.pause();
    });
    socket.once('end', () => this.push(null));
    socket.once('close', () => this.destroy());
    socket.once('error', (error) => this.destroy(error));
  }

  get remoteAddress() {
    return this.socket.remoteAddress;
  }

  get remotePort() {
    return this.socket.remotePort;
  }

  get remoteFamily() {
    return this.socket.remoteFamily;
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.socket.write(chunk, encoding, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.socket.end(callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.socket.destroy(error ?? undefined);
    callback(error);
  }
}
