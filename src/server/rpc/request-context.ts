import { Code, ConnectError, createContextKey, type HandlerContext, type Interceptor } from '@connectrpc/connect';
import { type MikroORM, entityManagerKey, isDatabaseUnavailable, PageRequestError } from '../../db';
import { requestIdFrom, requestIdKey, transportKey, type Transport } from '../../context';
import { apiError, errorInfoDetail, errorInfoOf, fallbackCodeOf, ERRORS, type ErrorCode } from '../../errors';
import type { Logger } from '../../config';
import { invalidUtf8, isInvalidUtf8Decoding } from './utf8';

export interface CallObserver {
  (call: { procedure: string; transport: Transport; code: string; seconds: number }): void;
}

function transportOf(contentType: string | null): Transport {
  if (contentType?.startsWith('application/grpc-web')) return 'grpc-web';
  if (contentType?.startsWith('application/grpc')) return 'grpc';
  return 'connect';
}

/** Set once the outermost interceptor has the call: from then on it maps the call's errors. */
const interceptedKey = createContextKey<boolean>(false, { description: 'call reached the interceptors' });

/** The gate's refusal of the caller, answered once the body is in (see createRequestGate). */
const callerRefusalKey = createContextKey<ConnectError | null>(null, { description: 'refusal of the caller' });

/**
 * A refusal decided before the call was handed over (the REST gateway's body and query
 * checks); the gate raises it once the caller is authenticated, so authentication
 * always answers first.
 */
export const pendingRefusalKey = createContextKey<ConnectError | null>(null, { description: 'refusal decided before the call' });

/**
 * Whether the client has gone away (closed its connection, reset its stream) before its
 * answer was complete. Set by whoever hands the call over (the node adapter, the REST
 * gateway); what fails then is the client leaving, not the service.
 */
export const clientGoneKey = createContextKey<() => boolean>(() => false, { description: 'client gone' });

/** Writes the answer must wait for: the audit event of a refusal decided before the interceptors. */
const answerAwaitsKey = createContextKey<Promise<void> | null>(null, { description: 'writes the answer waits for' });

/**
 * The answer's body, each chunk released only once the writes of the call's refusal are
 * done (see createRequestGate). connect-es decides the refusal, synchronously, before it
 * serializes it, so no byte of a refusal reaches the client before its audit event is
 * stored; and the event is stored whether or not the client stays to read it.
 */
export function afterRefusalRecords(body: AsyncIterable<Uint8Array>, values: HandlerContext['values']): AsyncIterable<Uint8Array> {
  return {
    [Symbol.asyncIterator]() {
      const it = body[Symbol.asyncIterator]();
      return {
        async next() {
          const chunk = await it.next();
          await values.get(answerAwaitsKey);
          return chunk;
        },
        // connect-es learns of write errors through throw(), and ends the call through return().
        ...(it.throw && { throw: (error?: unknown) => it.throw!(error) }),
        ...(it.return && { return: (value?: unknown) => it.return!(value) }),
      };
    },
  };
}

export interface RequestGateOptions {
  orm: MikroORM;
  logger: Logger;
  observe?: CallObserver;
  /** Establishes the caller; throws its refusal. */
  authenticate(ctx: HandlerContext): Promise<void>;
  /** Records the refusal of an audited RPC that never reached the audit interceptor; never rejects. */
  auditRefusal(ctx: HandlerContext, refusal: ConnectError): Promise<void>;
}

/**
 * connect-es runs a request gate on every protocol once the headers are in, before the
 * body is read, decompressed or decoded; interceptors run only after decoding. So the
 * gate gives each call its request id, its EntityManager fork and its caller.
 *
 * It is also the one seam that sees the errors raised between the gate and the
 * interceptors: an undecodable body, a missing or extra message, an unknown encoding, a
 * body past the limit. connect-es reports those with protocol codes and no ErrorInfo
 * (`internal` "parse binary: ..." for bad protobuf, answered 500 over Connect). It aborts
 * the call's signal with that very error before writing it out, on all three protocols,
 * and offers no hook to replace it, so the abort listener turns it into a coded refusal
 * carrying the request id, in place. A wrapper around the handler would have to re-encode the answer per protocol
 * (gRPC-web trailers live in the body), and a custom serializer cannot be configured.
 *
 * A refusal decided there (or the REST gateway's, raised by the gate) is audited like any
 * other refusal of an audited RPC. The abort listener cannot wait, so it starts the write
 * and leaves it where the adapter (afterRefusalRecords) holds the answer until it is done.
 * A client that went away is not refused: it is logged at debug, as it is nobody's fault here.
 *
 * A caller the gate refuses is answered with that refusal whatever the body holds, but
 * only once the body is in: Node's HTTP/2 client (grpc-js, connect-node) never frees the
 * unsent part of a body whose answer came early, and after about 10 MiB of such calls
 * refuses every new call on the connection. So off REST (whose gateway has read the body
 * already) the refusal waits: the outermost interceptor raises it, or, when decoding
 * failed first, the abort listener answers it in place of the decoding error.
 */
export function createRequestGate(options: RequestGateOptions): (ctx: HandlerContext) => Promise<void> {
  const { orm, logger, observe } = options;
  return async (ctx) => {
    const started = process.hrtime.bigint();
    const requestId = requestIdFrom(ctx.requestHeader.get('x-request-id'));
    const transport = ctx.values.get(transportKey) ?? transportOf(ctx.requestHeader.get('content-type'));
    const procedure = `${ctx.service.typeName}/${ctx.method.name}`;
    ctx.values.set(requestIdKey, requestId);
    ctx.values.set(transportKey, transport);
    ctx.values.set(entityManagerKey, orm.em.fork());
    ctx.signal.addEventListener(
      'abort',
      () => {
        const error: unknown = ctx.signal.reason;
        if (ctx.values.get(interceptedKey)) return;
        const seconds = Number(process.hrtime.bigint() - started) / 1e9;
        if (ctx.values.get(clientGoneKey)()) {
          observe?.({ procedure, transport, code: 'CANCELED', seconds });
          logger.debug({ requestId, procedure, transport, ms: Math.round(seconds * 1000) }, 'client went away before the call was decoded');
          return;
        }
        if (!(error instanceof ConnectError)) return;
        const callerRefusal = ctx.values.get(callerRefusalKey);
        if (callerRefusal && callerRefusal !== error) replaceWith(error, callerRefusal);
        const code = asRefusal(error, ctx.method.input.typeName);
        error.metadata.set('x-request-id', requestId);
        ctx.values.set(answerAwaitsKey, options.auditRefusal(ctx, error));
        observe?.({ procedure, transport, code, seconds });
        logger.info({ requestId, procedure, transport, code, ms: Math.round(seconds * 1000) }, 'call refused before decoding');
      },
      { once: true },
    );
    codeLateDecodingErrors(ctx, requestId);
    const call = { requestId, procedure, logger, clientGone: ctx.values.get(clientGoneKey) };
    try {
      try {
        await options.authenticate(ctx);
      } catch (error) {
        if (transport === 'rest') throw error;
        ctx.values.set(callerRefusalKey, callError(error, call));
      }
      // A deadline that passed meanwhile has had its coded answer from the abort listener;
      // it (or the caller's refusal, which comes first) must be the one written, not the
      // raw error of a decoding that fails after the signal is spent (an abort reaches the
      // listener once).
      const callerRefusal = ctx.values.get(callerRefusalKey);
      if (ctx.signal.aborted) throw callerRefusal ?? ctx.signal.reason;
      if (callerRefusal) return;
      const pending = ctx.values.get(pendingRefusalKey);
      if (pending) throw pending;
    } catch (error) {
      throw callError(error, call);
    }
  };
}

/**
 * Every protocol hands the error it is about to write to the context's `abort` first. The
 * gate's abort listener hears only the first abort: when a call's own deadline passes while
 * its body is still being read, the listener codes the deadline, and the decoding error
 * that follows would be written as the protocol raised it, without ErrorInfo or request id.
 * Such an error is made to say what was decided when the signal fired (the deadline's
 * refusal, already audited, or the caller's), the rule the gate follows when the signal
 * fires during authentication; one that follows no coded decision gets its own code.
 */
function codeLateDecodingErrors(ctx: HandlerContext & { abort?: (reason?: unknown) => void }, requestId: string): void {
  const abort = ctx.abort;
  if (!abort) return;
  ctx.abort = (reason?: unknown) => {
    if (ctx.signal.aborted && reason instanceof ConnectError && !errorInfoOf(reason) && !ctx.values.get(interceptedKey)) {
      const decided: unknown = ctx.signal.reason;
      if (decided instanceof ConnectError && decided !== reason && errorInfoOf(decided)) replaceWith(reason, decided);
      else asRefusal(reason, ctx.method.input.typeName);
      reason.metadata.set('x-request-id', requestId);
    }
    // connect-es aborts every call's context when the call ends, with no reason: the
    // AbortController would build a new DOMException (and its stack trace) per call for
    // nobody, ~3% of a small call's CPU. The end of a call is told with one shared reason.
    abort.call(ctx, reason === undefined ? CALL_ENDED : reason);
  };
}

/** The abort reason of a call's context when connect-es ends the call (see codeLateDecodingErrors). */
const CALL_ENDED = new DOMException('The call has ended.', 'AbortError');

/**
 * Gives a protocol-level error (it carries no ErrorInfo) its stable code. Before the
 * interceptors nothing but the request can be at fault: an `internal` there is a body
 * the decoder refused, and the protocols' `unimplemented` for a missing message or an
 * unknown encoding would answer a client's mistake with HTTP 501.
 */
function asRefusal(error: ConnectError, inputType: string): ErrorCode {
  const existing = errorInfoOf(error);
  if (existing) return existing.code;
  let code: ErrorCode;
  let message = error.rawMessage;
  switch (error.code) {
    case Code.Internal:
    case Code.InvalidArgument:
      if (isInvalidUtf8Decoding(error.rawMessage)) {
        code = 'INVALID_UTF8';
        message = `A string field of the ${inputType} message is not valid UTF-8.`;
      } else if (error.code === Code.Internal) {
        code = 'INVALID_ARGUMENT';
        message = `The request body is not a valid ${inputType} message.`;
      } else {
        code = 'INVALID_ARGUMENT';
      }
      break;
    case Code.Unimplemented:
      code = 'INVALID_ARGUMENT';
      break;
    case Code.ResourceExhausted:
      code = 'PAYLOAD_TOO_LARGE';
      break;
    default:
      code = fallbackCodeOf(error.code);
  }
  Object.assign(error, { code: ERRORS[code][0], rawMessage: message.slice(0, MAX_MESSAGE_LENGTH) });
  error.details.push(errorInfoDetail(code));
  return code;
}

/** Makes a protocol error (still to be written out by connect-es) say what `refusal` says. */
function replaceWith(error: ConnectError, refusal: ConnectError): void {
  Object.assign(error, { code: refusal.code, rawMessage: refusal.rawMessage });
  error.details.splice(0, error.details.length, ...refusal.details);
  refusal.metadata.forEach((value, name) => error.metadata.set(name, value));
}

/**
 * What the client is told about an error: its own refusal, UNAVAILABLE for a database
 * outage, else INTERNAL. A client that has gone away is told nothing; whatever failed
 * because it left is logged at debug.
 */
function callError(error: unknown, call: { requestId: string; procedure: string; logger: Logger; clientGone?: () => boolean }): ConnectError {
  let connectError: ConnectError;
  if (call.clientGone?.()) {
    call.logger.debug({ requestId: call.requestId, err: error, procedure: call.procedure }, 'client went away during the call');
    connectError = apiError('CANCELED', 'The client went away.');
  } else if (error instanceof ConnectError && (error.code !== Code.Internal || errorInfoOf(error))) {
    connectError = boundedMessage(error);
    // Refusals raised without a stable code (the health service's NotFound, a deadline) get the one their gRPC code implies.
    if (!errorInfoOf(connectError)) connectError.details.push(errorInfoDetail(fallbackCodeOf(connectError.code)));
  } else if (error instanceof PageRequestError) {
    // The persistence layer says which page request it cannot serve; the API says it with its code.
    connectError = apiError(error.code, error.message);
  } else if (isDatabaseUnavailable(error)) {
    call.logger.warn({ requestId: call.requestId, err: error, procedure: call.procedure }, 'database unavailable');
    connectError = databaseUnavailable();
  } else {
    call.logger.error({ requestId: call.requestId, err: error, procedure: call.procedure }, 'internal error');
    connectError = apiError('INTERNAL', `Internal error; quote request id ${call.requestId} when reporting it.`);
  }
  connectError.metadata.set('x-request-id', call.requestId);
  return connectError;
}

/**
 * Outermost interceptor: one log line and metric per call that got past the gate (which
 * gave it its request id, EntityManager fork and caller; set here when there is no gate,
 * as in-process router transports have none), and the mapping of every error into what
 * the client may see (see callError).
 */
export function createRequestContextInterceptor(orm: MikroORM, logger: Logger, observe?: CallObserver): Interceptor {
  return (next) => async (req) => {
    const started = process.hrtime.bigint();
    req.contextValues.set(interceptedKey, true);
    const callerRefusal = req.contextValues.get(callerRefusalKey);
    const requestId = req.contextValues.get(requestIdKey) || requestIdFrom(req.header.get('x-request-id'));
    const transport = req.contextValues.get(transportKey) ?? transportOf(req.header.get('content-type'));
    const procedure = `${req.service.typeName}/${req.method.name}`;
    req.contextValues.set(requestIdKey, requestId);
    req.contextValues.set(transportKey, transport);
    if (!req.contextValues.get(entityManagerKey)) req.contextValues.set(entityManagerKey, orm.em.fork());
    const finish = (code: string) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      observe?.({ procedure, transport, code, seconds });
      logger.info({ requestId, procedure, transport, code, ms: Math.round(seconds * 1000) }, 'call');
    };
    try {
      if (callerRefusal) throw callerRefusal;
      const res = await next(req);
      res.header.set('x-request-id', requestId);
      finish('OK');
      return res;
    } catch (error) {
      const connectError = callError(error, { requestId, procedure, logger, clientGone: req.contextValues.get(clientGoneKey) });
      finish(errorInfoOf(connectError)?.code ?? fallbackCodeOf(connectError.code));
      throw connectError;
    }
  };
}

/**
 * Refuses text PostgreSQL cannot store. Text and jsonb cannot hold U+0000, so a string
 * carrying one would fail its query as an internal error, and the audit event of the
 * refused action could not name its target (the id the caller sent). No field of this API
 * has a use for it. A lone surrogate (JSON can spell one, `"\ud800"`) has no UTF-8 form:
 * written out it would become U+FFFD, text the client never sent. Placed inside the audit
 * interceptor, before any handler names a target, so the refusal is audited like any other.
 */
export function createStorableTextInterceptor(): Interceptor {
  return (next) => async (req) => {
    const problem = req.stream ? null : unstorableText(req.message);
    if (problem === 'nul') throw apiError('INVALID_ARGUMENT', 'Text fields must not contain NUL (U+0000) characters.');
    if (problem === 'surrogate') throw invalidUtf8('A text field (it holds a lone surrogate, which has no UTF-8 form)');
    return next(req);
  };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function unstorableText(value: unknown): 'nul' | 'surrogate' | null {
  if (typeof value === 'string') return value.includes('\u0000') ? 'nul' : LONE_SURROGATE.test(value) ? 'surrogate' : null;
  const values = Array.isArray(value) ? value : typeof value === 'object' && value !== null && !(value instanceof Uint8Array) ? Object.values(value) : [];
  for (const item of values) {
    const problem = unstorableText(item);
    if (problem) return problem;
  }
  return null;
}

/** Longest error message sent back; handlers may echo what the caller sent. */
const MAX_MESSAGE_LENGTH = 1_000;

/**
 * A message echoing a huge field (an unknown health service name of a megabyte) would
 * travel in gRPC trailers, which HTTP/2 peers refuse past their header list size: the
 * whole connection fails instead of the one call.
 */
function boundedMessage(error: ConnectError): ConnectError {
  if (error.rawMessage.length <= MAX_MESSAGE_LENGTH) return error;
  const bounded = new ConnectError(`${error.rawMessage.slice(0, MAX_MESSAGE_LENGTH)}…`, error.code, error.metadata, [], error.cause);
  bounded.details = error.details;
  return bounded;
}

/** Seconds a client is asked to wait before calling again while the database is unreachable. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

/** The answer to a call the database could not serve: retry later, on every transport. */
export function databaseUnavailable(): ConnectError {
  return apiError('UNAVAILABLE', 'The service cannot reach its database; retry later.', {
    headers: { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  });
}
