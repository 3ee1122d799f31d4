import { createContextValues, type ConnectRouter } from '@connectrpc/connect';
import type { UniversalHandler, UniversalServerResponse } from '@connectrpc/connect/protocol';
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from '@connectrpc/connect-node';
import type { Logger } from '../../config';
import { requestIdFrom, requestIdKey } from '../../context';
import type { ErrorCode } from '../../errors';
import { clientWentAway, sendError, type RequestHandler } from '../edge';
import { afterRefusalRecords, clientGoneKey } from './request-context';

/**
 * Serves the router's RPCs over gRPC, gRPC-web and Connect, as connect-node's
 * `connectNodeAdapter` does, with three differences that adapter leaves no room for:
 *
 * - connect-es answers a request no protocol takes (a content type none of them speaks, a
 *   method the RPC does not allow, a bidi stream over HTTP/1.1) with a bare status before
 *   any gate runs: no body, no code, no request id. Those are answered here as every
 *   other refusal that is no protocol's: the JSON error with its stable code and request id.
 * - A refusal of an audited call decided before the interceptors is answered only once its
 *   audit event is stored (afterRefusalRecords).
 * - A client that goes away is logged at debug; connect-node prints every failed write
 *   with console.error.
 */
export function createRpcHandler(options: { router: ConnectRouter; logger: Logger }): RequestHandler {
  const { logger } = options;
  const handlers = new Map<string, UniversalHandler>(options.router.handlers.map((handler) => [handler.requestPath, handler]));
  return (req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
    const incoming = req.headers['x-request-id'];
    const requestId = () => requestIdFrom(typeof incoming === 'string' ? incoming : null);
    const handler = handlers.get(path);
    if (!handler) return sendError(res, 'ROUTE_NOT_FOUND', `No route for ${path}.`, requestId());
    // HTTP/1.0 may omit Host, without which connect-node cannot build the request URL.
    if (!('authority' in req) && !req.headers.host) return sendError(res, 'INVALID_ARGUMENT', 'The request has no Host header.', requestId());

    const values = createContextValues().set(clientGoneKey, () => clientWentAway(req, res));
    const procedure = `${handler.service.typeName}/${handler.method.name}`;
    // Every response closes, however its call ends; a failed write need not (HTTP/2 ignores writes to a reset stream).
    res.once('close', () => {
      if (clientWentAway(req, res)) logger.debug({ procedure, requestId: values.get(requestIdKey) || undefined }, 'client went away before its answer was written');
    });
    handler(universalRequestFromNodeRequest(req, res, undefined, values))
      .then((answer) => {
        const refusal = protocolRefusal(answer, handler);
        if (refusal) {
          for (const [name, value] of Object.entries(refusal.headers)) res.setHeader(name, value);
          return sendError(res, refusal.code, refusal.message, requestId());
        }
        return universalResponseToNodeResponse({ ...answer, body: answer.body && afterRefusalRecords(answer.body, values) }, res);
      })
      .catch((error: unknown) => {
        if (!clientWentAway(req, res)) logger.error({ err: error, procedure, requestId: values.get(requestIdKey) || undefined }, 'could not write the answer');
      });
  };
}

/**
 * The stable code of a bare refusal connect-es gives before any protocol handler runs,
 * or null for an answer of the protocol (which carries its own code).
 */
function protocolRefusal(
  answer: UniversalServerResponse,
  handler: UniversalHandler,
): { code: ErrorCode; message: string; headers: Record<string, string> } | null {
  if (answer.body !== undefined) return null;
  switch (answer.status) {
    case 405:
      return { code: 'METHOD_NOT_ALLOWED', message: `Call ${handler.method.name} with ${handler.allowedMethods.join(' or ')}.`, headers: { allow: handler.allowedMethods.join(', ') } };
    case 415:
      return {
        code: 'UNSUPPORTED_MEDIA_TYPE',
        message: 'Send the call as gRPC (application/grpc), gRPC-web (application/grpc-web) or Connect (application/json, application/proto).',
        headers: {},
      };
    case 505:
      // A client that expects both directions at once may hang on HTTP/1.1; closing the connection frees it.
      return { code: 'INVALID_ARGUMENT', message: `${handler.method.name} streams both ways: call it over HTTP/2.`, headers: { connection: 'close' } };
    default:
      return null;
  }
}
