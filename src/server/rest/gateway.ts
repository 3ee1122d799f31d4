import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import { create, fromBinary, fromJson, toJsonString, type DescMessage, type DescMethod, type DescField, type JsonValue, type Message } from '@bufbuild/protobuf';
import {
  Code,
  createConnectRouter,
  createContextKey,
  createContextValues,
  type ConnectError,
  type ConnectRouter,
  type ConnectRouterOptions,
  type Interceptor,
} from '@connectrpc/connect';
import type { UniversalHandler } from '@connectrpc/connect/protocol';
import { ErrorInfoSchema } from '../../gen/google/rpc/error_details_pb';
import { transportKey } from '../../context';
import { apiError, ERRORS, fallbackCodeOf, type ErrorCode } from '../../errors';
import { afterRefusalRecords, clientGoneKey, isInvalidUtf8Decoding, pendingRefusalKey, strictUtf8 } from '../rpc';
import { httpRuleOf } from './http-rules';
import { jsonWriterOf } from './json-writer';
import { sendError, writeJson, type NodeResponse } from '../edge';
import { codeFromString } from '@connectrpc/connect/protocol-connect';

/**
 * The REST gateway: a generic transcoder driven by the `google.api.http` rules read from
 * the descriptors at runtime. A request is matched against the rules, turned into the
 * method's proto3 JSON (path variables, `body: "*"`, query parameters) and handed to the
 * same Connect handler that serves gRPC and Connect, so interceptors, validation and
 * errors are shared. Adding an RPC with a rule needs no code here.
 */

type NodeRequest = IncomingMessage | Http2ServerRequest;

interface Route {
  verb: string;
  pattern: RegExp;
  /** JSON names of the fields bound by the path variables, in order. */
  pathFields: string[];
  bodyAll: boolean;
  template: string;
  method: DescMethod;
  handler: UniversalHandler;
}

export interface GatewayOptions {
  /** Registers the services, as for every other protocol (routes.ts). */
  routes: (router: ConnectRouter) => void;
  /** The gate and interceptors every call goes through, as on every other protocol. */
  routerOptions: ConnectRouterOptions;
  /** Fully qualified names of the services exposed under the REST paths. */
  services: readonly string[];
  maxBodyBytes: number;
}

export interface RouteInfo {
  verb: string;
  template: string;
  method: DescMethod;
  bodyAll: boolean;
}

export class RestGateway {
  private readonly routes: Route[];

  constructor(private readonly options: GatewayOptions) {
    // The gateway's own router over the same services and options, speaking Connect only
    // (the protocol it hands calls to), with the answer taken outermost (takeAnswer).
    const router = createConnectRouter({
      ...options.routerOptions,
      interceptors: [takeAnswer, ...(options.routerOptions.interceptors ?? [])],
      grpc: false,
      grpcWeb: false,
    });
    options.routes(router);
    this.routes = router.handlers
      .filter((handler) => options.services.includes(handler.service.typeName))
      .flatMap((handler) => routeOf(handler) ?? []);
  }

  /** The REST routes, as derived from the descriptors. */
  describe(): RouteInfo[] {
    return this.routes.map(({ verb, template, method, bodyAll }) => ({ verb, template, method, bodyAll }));
  }

  async handle(req: NodeRequest, res: NodeResponse, requestId: string): Promise<void> {
    const rawPath = (req.url ?? '/').split('?')[0] ?? '/';
    if (!isCanonicalPath(rawPath)) {
      return sendError(res, 'ROUTE_NOT_FOUND', 'No route for this path: paths must be canonical (no dot segments, empty segments or percent-encoding).', requestId);
    }
    const url = new URL(req.url ?? '/', 'http://gateway.invalid');
    const verb = (req.method ?? 'GET').toUpperCase();
    const candidates = this.routes
      .map((route) => ({ route, match: route.pattern.exec(rawPath) }))
      .filter((c) => c.match !== null);
    if (candidates.length === 0) {
      return sendError(res, 'ROUTE_NOT_FOUND', `No route for ${rawPath}.`, requestId);
    }
    const found = candidates.find((c) => c.route.verb === verb);
    if (!found) {
      res.setHeader('allow', [...new Set(candidates.map((c) => c.route.verb))].join(', '));
      return sendError(res, 'METHOD_NOT_ALLOWED', `${verb} is not allowed on ${rawPath}.`, requestId);
    }
    const { route, match } = found as { route: Route; match: RegExpExecArray };

    // A body or query the request cannot be made of is refused by the call itself, once the
    // caller is authenticated (and the refusal audited): 401 comes before 400.
    let message: Record<string, JsonValue> = {};
    let refusal: ConnectError | null = null;
    try {
      message = route.bodyAll ? await readJsonObject(req, this.options.maxBodyBytes) : {};
      assertUtf8Query(url.search);
      Object.assign(message, queryToJson(route.method, url.searchParams, route.bodyAll));
      route.pathFields.forEach((field, i) => {
        message[field] = match[i + 1] ?? '';
      });
      decodable(route.method, message);
    } catch (error) {
      if (!(error instanceof GatewayError)) throw error;
      refusal = apiError(error.code, error.message);
      message = {};
    }

    const header = new Headers({ 'content-type': 'application/json', 'x-request-id': requestId });
    const authorization = req.headers['authorization'];
    if (typeof authorization === 'string') header.set('authorization', authorization);
    const abort = new AbortController();
    // Only a caller gone before the answer is complete cancels the call; aborting every
    // finished call would build a DOMException per request for nobody.
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const taken: TakenAnswer = { message: null };
    const contextValues = createContextValues()
      .set(transportKey, 'rest')
      .set(takenAnswerKey, taken)
      .set(pendingRefusalKey, refusal)
      .set(clientGoneKey, () => abort.signal.aborted);
    const answer = await route.handler({
      httpVersion: '1.1',
      url: `http://gateway.invalid${route.handler.requestPath}`,
      method: 'POST',
      header,
      body: message,
      signal: abort.signal,
      contextValues,
    });

    const body = await collect(answer.body && afterRefusalRecords(answer.body, contextValues));
    answer.header?.forEach((value, name) => {
      if (!['content-type', 'content-length', 'content-encoding', 'connect-content-encoding'].includes(name)) {
        res.setHeader(name, value);
      }
    });
    if (answer.status === 200) return writeJson(res, 200, answerJson(route.method.output, taken.message));
    const { code, message: text, metadata } = restErrorOf(body);
    sendError(res, code, text, requestId, metadata);
  }
}

/** The message of a successful call, taken from connect-es for the gateway to write. */
interface TakenAnswer {
  message: Message | null;
}

const takenAnswerKey = createContextKey<TakenAnswer | null>(null, { description: 'REST answer' });

/**
 * Outermost on the gateway's router: takes the message of a successful call for the
 * gateway to write (answerJson) and hands connect-es an empty message of the same type to
 * serialize in its place, so the answer is turned into JSON once, without the object
 * Protobuf-ES would build and `JSON.stringify` walk again. Every interceptor inside sees
 * the real message; a refusal goes through connect-es, which encodes its details.
 */
const takeAnswer: Interceptor = (next) => async (req) => {
  const res = await next(req);
  const taken = req.contextValues.get(takenAnswerKey);
  if (!taken || res.stream) return res;
  taken.message = res.message;
  return { ...res, message: create(res.method.output) };
};

/**
 * The JSON of a successful answer: the writer compiled for its type (json-writer.ts), or
 * Protobuf-ES's for a type it does not know. Both write with the default options, as
 * connect-es does for the router's other protocols: the router sets no `jsonOptions`
 * (test/server/json-writer.test.ts). A value neither can write throws, and the call is
 * answered INTERNAL with the cause logged.
 */
function answerJson(schema: DescMessage, message: Message | null): string {
  if (!message) throw new Error(`no ${schema.typeName} was taken from the call`);
  const write = jsonWriterOf(schema);
  return write ? write(message) : toJsonString(schema, message);
}

class GatewayError extends Error {
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
  }
}

/**
 * Refuses a body whose fields do not have the request's types (`"confirmIdentity": "true"`)
 * here rather than in the protocol layer, which decodes only after the gate has let the
 * call through and where the refusal could no longer be audited.
 */
function decodable(method: DescMethod, message: Record<string, JsonValue>): void {
  try {
    fromJson(method.input, message, { ignoreUnknownFields: true });
  } catch (error) {
    const text = error instanceof Error ? error.message : 'The body does not match the request.';
    throw new GatewayError(isInvalidUtf8Decoding(text) ? 'INVALID_UTF8' : 'INVALID_ARGUMENT', text);
  }
}

function routeOf(handler: UniversalHandler): Route | null {
  const rule = httpRuleOf(handler.method);
  if (!rule) return null;
  const source = rule.segments
    .map((segment) => (typeof segment === 'string' ? segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') : '([^/]+)'))
    .join('/');
  return {
    verb: rule.verb,
    pattern: new RegExp(`^${source}$`),
    pathFields: rule.pathFields.map((field) => field.jsonName),
    bodyAll: rule.bodyAll,
    template: rule.template,
    method: handler.method,
    handler,
  };
}

async function readJsonObject(req: NodeRequest, maxBytes: number): Promise<Record<string, JsonValue>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > maxBytes) throw new GatewayError('PAYLOAD_TOO_LARGE', `The body exceeds ${maxBytes} bytes.`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw new GatewayError('PAYLOAD_TOO_LARGE', `The body exceeds ${maxBytes} bytes.`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  const contentType = String(req.headers['content-type'] ?? '');
  if (!/^application\/json\s*(;|$)/i.test(contentType)) {
    throw new GatewayError('UNSUPPORTED_MEDIA_TYPE', 'Send the body as application/json.');
  }
  let text: string;
  try {
    text = strictUtf8.decode(Buffer.concat(chunks));
  } catch {
    throw new GatewayError('INVALID_UTF8', 'The body is not valid UTF-8.');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new GatewayError('MALFORMED_JSON', 'The body is not valid JSON.');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new GatewayError('MALFORMED_JSON', 'The body must be a JSON object.');
  }
  return value as Record<string, JsonValue>;
}

/**
 * Only the canonical spelling of a path is routed. URL parsing resolves `.` and `..`
 * (`/webhooks/./x`, `/webhooks/%2e/x`) and decoding turns `%2f` or `%5c` into separators
 * after matching, so one resource would answer to many spellings and a path variable could
 * carry a separator into a lookup. No route or id of this API needs any of them: ids are
 * UUIDs, so a percent sign anywhere in the path is refused too, encoded ids included. An
 * empty segment is one too, a trailing slash included: `/webhooks/<id>/` is not `/webhooks/<id>`.
 */
function isCanonicalPath(path: string): boolean {
  if (path.includes('%') || path.includes('\\')) return false;
  return path
    .split('/')
    .slice(1)
    .every((segment) => segment !== '' && segment !== '.' && segment !== '..');
}

/**
 * URLSearchParams decodes a percent-encoded byte sequence that is not UTF-8 (`%ff`) to
 * U+FFFD; a query is taken as sent or refused, as a body is. A `%` that starts no escape
 * stays the literal character it is to URLSearchParams.
 */
function assertUtf8Query(search: string): void {
  for (const part of search.slice(1).split(/[&=]/)) {
    try {
      decodeURIComponent(part.replace(/%(?![0-9a-f]{2})/gi, '%25'));
    } catch {
      throw new GatewayError('INVALID_UTF8', 'The query is not valid UTF-8.');
    }
  }
}

/** Query parameters bind to scalar fields by proto or JSON name; repeated ones may repeat. */
function queryToJson(method: DescMethod, params: URLSearchParams, bodyAll: boolean): Record<string, JsonValue> {
  const json: Record<string, JsonValue> = {};
  for (const name of new Set(params.keys())) {
    const field = method.input.fields.find((f) => f.name === name || f.jsonName === name);
    if (bodyAll || !field || field.fieldKind === 'message' || field.fieldKind === 'map') {
      throw new GatewayError('INVALID_ARGUMENT', `Unknown query parameter "${name}".`);
    }
    const values = params.getAll(name).map((v) => scalarFromQuery(field, v));
    if (field.fieldKind === 'list') json[field.jsonName] = values;
    else if (values.length > 1) throw new GatewayError('INVALID_ARGUMENT', `Query parameter "${name}" must not repeat.`);
    else json[field.jsonName] = values[0] ?? '';
  }
  return json;
}

function scalarFromQuery(field: DescField, value: string): JsonValue {
  const scalar = field.fieldKind === 'scalar' || field.fieldKind === 'list' ? field.scalar : undefined;
  // proto3 JSON wants booleans as true/false and accepts numbers as strings.
  if (scalar === 8 /* BOOL */) {
    if (value === 'true' || value === 'false') return value === 'true';
    throw new GatewayError('INVALID_ARGUMENT', `Query parameter "${field.name}" must be true or false.`);
  }
  return value;
}

async function collect(body: AsyncIterable<Uint8Array> | undefined): Promise<Buffer> {
  if (!body) return Buffer.alloc(0);
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** Turns a Connect error body into the REST error: the stable code, its message and metadata. */
function restErrorOf(body: Buffer): { code: ErrorCode; message: string; metadata: Record<string, string> } {
  try {
    const parsed = JSON.parse(body.toString('utf8')) as {
      code?: string;
      message?: string;
      details?: { type?: string; value?: string }[];
    };
    const detail = parsed.details?.find((d) => d.type === 'google.rpc.ErrorInfo');
    if (detail?.value) {
      const info = fromBinary(ErrorInfoSchema, Buffer.from(detail.value, 'base64'));
      if (info.reason in ERRORS) return { code: info.reason as ErrorCode, message: parsed.message ?? '', metadata: info.metadata };
    }
    return { code: fallbackCodeOf(codeFromString(parsed.code ?? '') ?? Code.Unknown), message: parsed.message ?? '', metadata: {} };
  } catch {
    return { code: 'INTERNAL', message: 'Internal error.', metadata: {} };
  }
}
