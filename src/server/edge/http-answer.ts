import type { ServerResponse } from 'node:http';
import type { Http2ServerResponse } from 'node:http2';
import { httpStatusOf, type ErrorCode } from '../../errors';

/**
 * How every answer that is no RPC protocol's is written: the REST gateway's, the plain
 * routes', the RPC handler's refusals of what no protocol takes, and the HTTP/1.1
 * parser's refusals. A leaf: it imports nothing of the server, so the listener's layer and
 * the gateway's both take it from here.
 */

export type NodeResponse = ServerResponse | Http2ServerResponse;

/** The JSON error every REST-style refusal carries. */
export function errorBody(code: ErrorCode, message: string, requestId: string, metadata: Record<string, string> = {}): Record<string, unknown> {
  const body: Record<string, unknown> = { code, message, requestId };
  if (Object.keys(metadata).length > 0) body.details = metadata;
  return body;
}

export function sendError(
  res: NodeResponse,
  code: ErrorCode,
  message: string,
  requestId: string,
  metadata: Record<string, string> = {},
): void {
  if (res.headersSent) return void res.end();
  res.setHeader('x-request-id', requestId);
  // Also in a header: an answer to HEAD has no body to carry it.
  res.setHeader('x-error-code', code);
  writeJson(res, httpStatusOf(code), JSON.stringify(errorBody(code, message, requestId, metadata)));
}

/**
 * Writes a response on either HTTP version (their compat APIs differ only in types). With
 * its length declared, an HTTP/1.1 answer goes out as head and body in one write, where
 * without it Node frames the body as chunks. An answer to HEAD has no body, and its head
 * stays as it was, without a length.
 */
export function writeBody(res: NodeResponse, status: number, contentType: string, body: string | Buffer): void {
  const plain = res as ServerResponse;
  if (plain.req?.method === 'HEAD') plain.writeHead(status, { 'content-type': contentType });
  else plain.writeHead(status, { 'content-type': contentType, 'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.length });
  plain.end(body);
}

export function writeJson(res: NodeResponse, status: number, body: string | Buffer): void {
  writeBody(res, status, 'application/json', body);
}
