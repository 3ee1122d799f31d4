import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import type { MikroORM } from '../db/orm';
import { entityManagerKey } from '../db/context';
import { requestIdFrom, requestIdKey, transportKey, type Transport } from '../context';
import { apiError, errorInfoOf, fallbackCodeOf } from '../errors';
import { isDatabaseUnavailable } from '../db/errors';
import type { Logger } from '../config/logger';

export interface CallObserver {
  (call: { procedure: string; transport: Transport; code: string; seconds: number }): void;
}

function transportOf(contentType: string | null): Transport {
  if (contentType?.startsWith('application/grpc-web')) return 'grpc-web';
  if (contentType?.startsWith('application/grpc')) return 'grpc';
  return 'connect';
}

/**
 * Outermost interceptor: gives every call a request id, its own EntityManager fork and
 * one log line; turns anything that is not a deliberate ConnectError into `unavailable`
 * when the database cannot serve (the client should retry), else into `internal` with
 * the message hidden (the cause goes to the log with the request id).
 */
export function createRequestContextInterceptor(orm: MikroORM, logger: Logger, observe?: CallObserver): Interceptor {
  return (next) => async (req) => {
    const started = process.hrtime.bigint();
    const requestId = requestIdFrom(req.header.get('x-request-id'));
    const transport = req.contextValues.get(transportKey) ?? transportOf(req.header.get('content-type'));
    req.contextValues.set(requestIdKey, requestId);
    req.contextValues.set(transportKey, transport);
    req.contextValues.set(entityManagerKey, orm.em.fork());
    const finish = (code: string) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      observe?.({ procedure: `${req.service.typeName}/${req.method.name}`, transport, code, seconds });
      logger.info({ requestId, procedure: `${req.service.typeName}/${req.method.name}`, transport, code, ms: Math.round(seconds * 1000) }, 'call');
    };
    try {
      if (!req.stream && containsNul(req.message)) {
        throw apiError('INVALID_ARGUMENT', 'Text fields must not contain NUL (U+0000) characters.');
      }
      const res = await next(req);
      res.header.set('x-request-id', requestId);
      finish('OK');
      return res;
    } catch (error) {
      let connectError: ConnectError;
      if (error instanceof ConnectError && (error.code !== Code.Internal || errorInfoOf(error))) {
        connectError = boundedMessage(error);
      } else if (isDatabaseUnavailable(error)) {
        logger.warn({ requestId, err: error, procedure: `${req.service.typeName}/${req.method.name}` }, 'database unavailable');
        connectError = databaseUnavailable();
      } else {
        logger.error({ requestId, err: error, procedure: `${req.service.typeName}/${req.method.name}` }, 'internal error');
        connectError = apiError('INTERNAL', `Internal error; quote request id ${requestId} when reporting it.`);
      }
      connectError.metadata.set('x-request-id', requestId);
      finish(errorInfoOf(connectError)?.code ?? fallbackCodeOf(connectError.code));
      throw connectError;
    }
  };
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000, so a string carrying one fails its
 * query as an internal error, and the audit event of a refused action (whose target is
 * the id the caller sent) cannot be written. No field of this API has a use for it.
 */
function containsNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (Array.isArray(value)) return value.some(containsNul);
  if (typeof value === 'object' && value !== null && !(value instanceof Uint8Array)) return Object.values(value).some(containsNul);
  return false;
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
