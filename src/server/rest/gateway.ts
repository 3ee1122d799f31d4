import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import { create, fromJson, isMessage, toJsonString, type DescMessage, type DescMethod, type DescMethodUnary, type DescField, type DescService, type JsonValue, type Message } from '@bufbuild/protobuf';
import {
  ConnectError,
  createContextValues,
  createHandlerContext,
  type ConnectRouterOptions,
  type HandlerContext,
  type ServiceImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from '@connectrpc/connect';
import { transportKey } from '../../context';
import { apiError, errorInfoOf, fallbackCodeOf, type ErrorCode } from '../../errors';
import { clientGoneKey, isInvalidUtf8Decoding, pendingRefusalKey, refusalRecorded, strictUtf8 } from '../rpc';
import { httpRuleOf } from './http-rules';
import { jsonWriterOf } from './json-writer';
import { sendError, writeJson, type NodeResponse } from '../edge';

/**
 * The REST gateway: a generic transcoder driven by the `google.api.http` rules read from
 * the descriptors at runtime. A request is matched against the rules, turned into the
 * method's proto3 JSON (path variables, `body: "*"`, query parameters), decoded once into
 * the request message and handed to the same implementation the router serves gRPC and
 * Connect with, through the same gate and interceptors, so validation and errors are
 * shared. Adding an RPC with a rule needs no code here.
 */

type NodeRequest = IncomingMessage | Http2ServerRequest;

interface Route {
  verb: string;
  pattern: RegExp;
  /** JSON names of the fields bound by the path variables, in order. */
  pathFields: string[];
  bodyAll: boolean;
  template: string;
  service: DescService;
  method: DescMethodUnary;
  impl: (message: Message, ctx: HandlerContext) => unknown;
}

export interface GatewayOptions {
  /** The implementations as registered on the router (routes.ts registerServices). */
  services: readonly ServiceImplSpec[];
  /** The router's gate, interceptors and JSON options: every call goes through them, as on every other protocol. */
  routerOptions: ConnectRouterOptions;
  /** Fully qualified names of the services exposed under the REST paths. */
  exposed: readonly string[];
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

  /** Decodes a request as the router's JSON serialization would: unknown fields as it is told. */
  private readonly ignoreUnknownFields: boolean;

  constructor(private readonly options: GatewayOptions) {
    this.ignoreUnknownFields = options.routerOptions.jsonOptions?.ignoreUnknownFields ?? false;
    this.routes = options.services
      .filter((spec) => options.exposed.includes(spec.service.typeName))
      .flatMap((spec) => Object.values(spec.methods).flatMap((method) => (method.kind === 'unary' ? (routeOf(spec.service, method.method, method.impl) ?? []) : [])));
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
    let message: Message = create(route.method.input);
    let refusal: ConnectError | null = null;
    try {
      const json = route.bodyAll ? await readJsonObject(req, this.options.maxBodyBytes) : {};
      assertUtf8Query(url.search);
      Object.assign(json, queryToJson(route.method, url.searchParams, route.bodyAll));
      route.pathFields.forEach((field, i) => {
        json[field] = match[i + 1] ?? '';
      });
      message = decode(route.method, json, this.ignoreUnknownFields);
    } catch (error) {
      if (!(error instanceof GatewayError)) throw error;
      refusal = apiError(error.code, error.message);
    }

    const requestHeader = new Headers({ 'content-type': 'application/json', 'x-request-id': requestId });
    const authorization = req.headers['authorization'];
    if (typeof authorization === 'string') requestHeader.set('authorization', authorization);
    const abort = new AbortController();
    // Only a caller gone before the answer is complete cancels the call; aborting every
    // finished call would build a DOMException per request for nobody.
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const ctx = createHandlerContext({
      service: route.service,
      method: route.method,
      protocolName: 'rest',
      requestMethod: 'POST',
      url: `http://gateway.invalid/${route.service.typeName}/${route.method.name}`,
      requestSignal: abort.signal,
      requestHeader,
      contextValues: createContextValues()
        .set(transportKey, 'rest')
        .set(pendingRefusalKey, refusal)
        .set(clientGoneKey, () => abort.signal.aborted),
    });
    let answer: UnaryResponse;
    try {
      answer = await this.call(route, ctx, message);
    } catch (error) {
      if (!(error instanceof ConnectError)) throw error;
      // As connect-es does with what it is about to write: the gate hears it (a refusal
      // decided before the interceptors is audited there), and the answer waits for that.
      ctx.abort(error);
      await refusalRecorded(ctx.values);
      setHeaders(res, ctx.responseHeader);
      setHeaders(res, error.metadata);
      const info = errorInfoOf(error);
      return sendError(res, info?.code ?? fallbackCodeOf(error.code), error.rawMessage, requestId, info?.metadata ?? {});
    }
    ctx.abort();
    setHeaders(res, answer.header);
    writeJson(res, 200, answerJson(route.method.output, answer.message));
  }

  /** The call as every protocol makes it: the gate, then the interceptors, outermost first, around the implementation. */
  private async call(route: Route, ctx: HandlerContext, message: Message): Promise<UnaryResponse> {
    const { requestGate, interceptors = [] } = this.options.routerOptions;
    if (requestGate) await requestGate(ctx);
    const { service, method } = route;
    const invoke = async (req: UnaryRequest): Promise<UnaryResponse> => {
      const output = await route.impl(req.message, ctx);
      return {
        stream: false,
        service,
        method,
        header: ctx.responseHeader,
        trailer: ctx.responseTrailer,
        message: isMessage(output, method.output) ? output : create(method.output, output as never),
      };
    };
    const next = interceptors.reduceRight<(req: UnaryRequest) => Promise<UnaryResponse>>((inner, interceptor) => interceptor(inner as never) as never, invoke);
    return next({
      stream: false,
      service,
      method,
      requestMethod: ctx.requestMethod,
      url: ctx.url,
      signal: ctx.signal,
      header: ctx.requestHeader,
      contextValues: ctx.values,
      message,
    });
  }
}

/** The headers a call set for its answer, but those of the body, which the gateway writes. */
function setHeaders(res: NodeResponse, headers: Headers): void {
  headers.forEach((value, name) => {
    if (!['content-type', 'content-length', 'content-encoding'].includes(name)) res.setHeader(name, value);
  });
}

/**
 * The JSON of a successful answer: the writer compiled for its type (json-writer.ts), or
 * Protobuf-ES's for a type it does not know. Both write with the default options, as
 * connect-es does for the router's other protocols: the router sets no `jsonOptions`
 * (test/server/json-writer.test.ts). A value neither can write throws, and the call is
 * answered INTERNAL with the cause logged.
 */
function answerJson(schema: DescMessage, message: Message): string {
  const write = jsonWriterOf(schema);
  return write ? write(message) : toJsonString(schema, message);
}

class GatewayError extends Error {
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
  }
}

/**
 * The request message, decoded once. A body whose fields do not have the request's types
 * (`"confirmIdentity": "true"`) is refused, by the gate once the caller is authenticated,
 * so the refusal is audited as any other.
 */
function decode(method: DescMethod, json: Record<string, JsonValue>, ignoreUnknownFields: boolean): Message {
  try {
    return fromJson(method.input, json, { ignoreUnknownFields });
  } catch (error) {
    const text = error instanceof Error ? error.message : 'The body does not match the request.';
    throw new GatewayError(isInvalidUtf8Decoding(text) ? 'INVALID_UTF8' : 'INVALID_ARGUMENT', text);
  }
}

function routeOf(service: DescService, method: DescMethodUnary, impl: Route['impl']): Route | null {
  const rule = httpRuleOf(method);
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
    service,
    method,
    impl,
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
