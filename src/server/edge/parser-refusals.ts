import http from 'node:http';
import type net from 'node:net';
import type { Logger } from '../../config';
import { requestIdFrom } from '../../context';
import { httpStatusOf, type ErrorCode } from '../../errors';
import { errorBody, sendError } from './http-answer';

/** A request on an HTTP/1.1 connection, from its head until its response closes. */
interface Exchange {
  req: http.IncomingMessage;
  res: http.ServerResponse;
}

/**
 * How long a refused connection stays open after its refusal is written, for the client to
 * read it and close first: closing a socket with unread bytes in its receive buffer sends
 * RST, and a client that gets RST may lose the refusal before it reads it.
 */
const LINGER_MS = 1_000;

/** Socket errors that mean the client is gone: nothing can be answered. */
const GONE = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ERR_STREAM_DESTROYED', 'ERR_STREAM_WRITE_AFTER_END']);

/**
 * Answers what Node's HTTP/1.1 parser refuses (a malformed head, CR or LF or other invalid
 * bytes in the request target or a header, a head over `http.maxHeaderSize`, a head or body
 * past the server's deadlines) as the service answers every other refusal: the JSON error
 * with its stable code and a fresh request id, in the body and in `x-request-id`; Node's own
 * answer is a bare status line.
 *
 * The parser reads a pipelined connection ahead of its answers, so a refused head can
 * follow requests still being answered. Their responses come first, whole: the refusal is
 * written only once every earlier response on the connection has been written out, and
 * never inside one. A request whose body the parser was reading when it failed can never
 * complete; unless its answer has begun, the refusal is its answer. Once refused, the
 * connection is closed (`Connection: close`): the parser cannot read it any further.
 */
export class ParserRefusals {
  private readonly open = new WeakMap<net.Socket, Set<Exchange>>();
  /** Connections refused: the parser reports every later chunk again, and each is answered once. */
  private readonly refused = new WeakSet<net.Socket>();
  /** The refusal of a connection, waiting for the responses before it to be written out. */
  private readonly pending = new WeakMap<net.Socket, () => void>();

  constructor(private readonly logger?: Logger) {}

  /** Follows a request the HTTP/1.1 server handed over until its response closes. */
  track(req: http.IncomingMessage, res: http.ServerResponse): void {
    const socket = req.socket;
    let exchanges = this.open.get(socket);
    if (!exchanges) this.open.set(socket, (exchanges = new Set()));
    const exchange = { req, res };
    exchanges.add(exchange);
    res.once('close', () => {
      exchanges.delete(exchange);
      this.answerWhenDue(socket, this.pending.get(socket));
    });
  }

  /**
   * Refuses a request line without an HTTP version, which Node's parser reads as HTTP/0.9:
   * in practice a CR or LF inside the target, whose tail the parser then takes for
   * headers. Node would answer it without Content-Length or chunking, the body ending
   * only with the connection, which a client reading HTTP/1.1 takes for an empty body.
   * Returns whether it answered.
   */
  refusesVersionless(req: http.IncomingMessage, res: http.ServerResponse): boolean {
    if (req.httpVersionMajor >= 1) return false;
    const requestId = requestIdFrom(null);
    this.logger?.info({ requestId, code: 'MALFORMED_REQUEST', reason: 'no HTTP version' }, 'request refused by the HTTP/1.1 parser');
    req.resume();
    res.setHeader('connection', 'close');
    sendError(res, 'MALFORMED_REQUEST', MESSAGES.MALFORMED_REQUEST, requestId);
    return true;
  }

  /** The HTTP/1.1 server's 'clientError': the parser (or a deadline) refused the connection's next request. */
  readonly refuse = (error: NodeJS.ErrnoException, socket: net.Socket): void => {
    if (this.refused.has(socket)) return;
    this.refused.add(socket);
    if (GONE.has(error.code ?? '') || !socket.writable) {
      socket.destroy();
      return;
    }
    const code = codeOf(error);
    const requestId = requestIdFrom(null);
    const answer = () => {
      this.pending.delete(socket);
      if (!socket.writable) return void socket.destroy();
      this.logger?.info({ requestId, code, reason: error.code }, 'request refused by the HTTP/1.1 parser');
      socket.end(refusalBytes(code, requestId));
      const linger = setTimeout(() => socket.destroy(), LINGER_MS);
      socket.once('close', () => clearTimeout(linger));
    };
    this.pending.set(socket, answer);
    const waiting = this.earlierResponses(socket);
    if (waiting === 0) return answer();
    this.logger?.debug({ requestId, code, reason: error.code, waiting }, 'refused request waits for the responses before it on its connection');
  };

  private answerWhenDue(socket: net.Socket, answer: (() => void) | undefined): void {
    if (answer && this.earlierResponses(socket) === 0) answer();
  }

  /**
   * Responses on the connection to be written before its refusal: every one still to be
   * written or being written, except for a request the parser could not finish reading
   * whose answer has not begun (it will never have one).
   */
  private earlierResponses(socket: net.Socket): number {
    return [...(this.open.get(socket) ?? [])].filter(({ req, res }) => req.complete || res.headersSent).length;
  }
}

/** The codes of what the parser refuses. */
type ParserRefusal = Extract<ErrorCode, 'MALFORMED_REQUEST' | 'HEADERS_TOO_LARGE' | 'PAYLOAD_TOO_LARGE' | 'REQUEST_TIMEOUT'>;

function codeOf(error: NodeJS.ErrnoException): ParserRefusal {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return 'HEADERS_TOO_LARGE';
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return 'PAYLOAD_TOO_LARGE';
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return 'REQUEST_TIMEOUT';
    default:
      return 'MALFORMED_REQUEST';
  }
}

const MESSAGES: Record<ParserRefusal, string> = {
  MALFORMED_REQUEST: 'The request is not valid HTTP/1.1: its request line (method, target, version) or a header could not be read.',
  HEADERS_TOO_LARGE: `The request line and headers exceed ${Math.floor(http.maxHeaderSize / 1024)} KiB.`,
  PAYLOAD_TOO_LARGE: `The chunk extensions of the request body exceed ${Math.floor(http.maxHeaderSize / 1024)} KiB.`,
  REQUEST_TIMEOUT: 'The request head or body did not arrive in time.',
};

/** The whole refusal as bytes: written straight to the socket, as no response object exists for it. */
function refusalBytes(code: ParserRefusal, requestId: string): Buffer {
  const status = httpStatusOf(code);
  const body = JSON.stringify(errorBody(code, MESSAGES[code], requestId));
  const head = [
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(body)}`,
    `x-request-id: ${requestId}`,
    `x-error-code: ${code}`,
    `date: ${new Date().toUTCString()}`,
    'connection: close',
  ];
  return Buffer.from(`${head.join('\r\n')}\r\n\r\n${body}`);
}
