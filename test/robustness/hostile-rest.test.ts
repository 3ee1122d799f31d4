/**
 * Hostile input on the REST gateway: thousands of generated malformed requests on every
 * route (and on paths that are not routes). Whatever arrives, the gateway answers with a
 * documented refusal (JSON with a string code and message, never a 5xx), keeps serving,
 * and stores nothing: the domain tables are byte-for-byte the same afterwards and the
 * audit trail only gained refusals.
 */
import http2 from 'node:http2';
import fc from 'fast-check';
import { ScalarType } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { validateEndpointUrl } from '../../src/webhooks/endpoint-url';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { PostService } from '../../src/gen/publishing/v1/post_service_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { startTestApp, type TestApp } from '../support/app';
import { transport } from '../support/clients';
import {
  auditEventsSince,
  auditHighWater,
  http1Request,
  inPool,
  rawH2,
  rawHttp1,
  restErrorProblem,
  snapshotDomain,
  stillAlive,
  type RawResponse,
  hostileCallers,
  type CallerName,
  ROBUSTNESS_SEED,
} from './support';

const TOTAL_REQUESTS = 8_000;
const CONCURRENCY = 16;
/** Node's default limit on the request line plus headers; beyond it the HTTP parser answers 431. */
const NODE_MAX_HEADER_BYTES = 16 * 1024;

let t: TestApp;
/** Every request is made as one of these callers. */
let keys: Record<CallerName, string>;

beforeAll(async () => {
  t = await startTestApp();
  keys = await hostileCallers(t);
});
afterAll(async () => {
  await t?.close();
});

// ---------------------------------------------------------------------------------------
// The routes, as written in the README; the test fails if the gateway serves others.

interface RouteSpec {
  verb: string;
  template: string;
  /** A GET that only reads: 200 is a fine answer to it. */
  reads: boolean;
}

const ROUTES: RouteSpec[] = [
  { verb: 'GET', template: '/api/v1/connections', reads: true },
  { verb: 'POST', template: '/api/v1/connections/start', reads: false },
  { verb: 'POST', template: '/api/v1/connections/complete', reads: false },
  { verb: 'POST', template: '/api/v1/connections/{id}/confirm', reads: false },
  { verb: 'POST', template: '/api/v1/connections/{id}/disable', reads: false },
  { verb: 'POST', template: '/api/v1/connections/{connection_id}/release', reads: false },
  { verb: 'GET', template: '/api/v1/webhooks', reads: true },
  { verb: 'POST', template: '/api/v1/webhooks', reads: false },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/test', reads: false },
  { verb: 'DELETE', template: '/api/v1/webhooks/{id}', reads: false },
  { verb: 'PATCH', template: '/api/v1/webhooks/{id}', reads: false },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/rotate-secret', reads: false },
  { verb: 'GET', template: '/api/v1/webhooks/{id}/deliveries', reads: true },
  { verb: 'GET', template: '/api/v1/webhooks/{id}/deliveries/{delivery_id}', reads: true },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/deliveries/{delivery_id}/resend', reads: false },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/recover', reads: false },
  { verb: 'GET', template: '/api/v1/webhooks/{id}/recoveries/{job_id}', reads: true },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/pause', reads: false },
  { verb: 'POST', template: '/api/v1/webhooks/{id}/resume', reads: false },
  { verb: 'GET', template: '/api/v1/webhooks/{id}/statistics', reads: true },
  { verb: 'GET', template: '/api/v1/event-types', reads: true },
  { verb: 'POST', template: '/api/v1/posts', reads: false },
  { verb: 'GET', template: '/api/v1/posts', reads: true },
];

interface FieldSpec {
  json: string;
  proto: string;
  kind: 'string' | 'int' | 'bool' | 'strings' | 'timestamp';
}

function fieldsOf(template: string, verb: string): FieldSpec[] {
  const route = t.app.gateway.describe().find((r) => r.template === template && r.verb === verb);
  if (!route) throw new Error(`no route ${verb} ${template}`);
  return route.method.input.fields.map((f) => ({
    json: f.jsonName,
    proto: f.name,
    kind:
      f.fieldKind === 'list'
        ? 'strings'
        : f.fieldKind === 'message'
          ? 'timestamp'
          : f.scalar === ScalarType.BOOL
            ? 'bool'
            : f.scalar === ScalarType.INT32
              ? 'int'
              : 'string',
  }));
}

// ---------------------------------------------------------------------------------------
// Generators

/** Strings chosen to break parsers, validators and SQL, next to arbitrary ones. */
const nastyString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.constantFrom(
    '', ' ', '\u0000', '\ud800', '\udfff\ud800', '\u202e', '\ufeff', 'NaN', 'Infinity', '-1', '1e999', '9007199254740993',
    'true', 'null', '__proto__', 'constructor', "' or 1=1 --", '"; drop table connections; --', '%00', '../..', '..%2f..',
    'https://', 'http://hooks.example.com/x', 'https://user:pw@hooks.example.com/x', 'https://hooks.example.com/#frag',
    'https://169.254.169.254/latest', 'https://[::1]/', 'javascript:alert(1)', 'webhook.test', 'Webhook.Test', 'a..b',
    'instagram', 'INSTAGRAM', 'twitter', 'tiktok', 'mastodon', 'v1..', 'v2.abc.def', 'scheduled', 'held',
    '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '{{7*7}}', '${7*7}', '\r\nX-Injected: 1',
  ),
);
const anyJson = fc.jsonValue({ maxDepth: 3 });

function valueFor(field: FieldSpec, typed = false): fc.Arbitrary<unknown> {
  const wrong = fc.oneof(fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(nastyString, { maxLength: 3 }), fc.dictionary(nastyString, anyJson, { maxKeys: 3 }));
  const right: Record<FieldSpec['kind'], fc.Arbitrary<unknown>> = {
    string: nastyString,
    int: fc.oneof(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), fc.constantFrom(2 ** 31, -(2 ** 31) - 1, 1e20, 1.5, '12', '0x10', '1e3', ' 5', '-0')),
    bool: fc.oneof(fc.boolean(), fc.constantFrom('true', 'false', 1, 0, 'yes')),
    strings: fc.array(nastyString, { maxLength: 25 }),
    timestamp: fc.oneof(
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.constantFrom(
        '0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999999999Z', '10000-01-01T00:00:00Z', '0000-00-00T00:00:00Z',
        '2026-13-40T25:61:61Z', '2026-11-21T10:00:00+25:00', '2026-11-21', 'tomorrow', '1e10', '2016-12-31T23:59:60Z',
      ),
      fc.integer(),
      fc.record({ seconds: fc.integer(), nanos: fc.integer() }),
    ),
  };
  return typed ? right[field.kind] : fc.oneof({ weight: 2, arbitrary: right[field.kind] }, { weight: 1, arbitrary: wrong });
}

type BodySpec =
  | { t: 'object'; value: Record<string, unknown> }
  | { t: 'json'; value: unknown }
  | { t: 'text'; text: string }
  | { t: 'invalid-utf8'; base: Record<string, unknown>; at: number; bytes: number[] }
  | { t: 'deep'; depth: number; style: 'array' | 'object'; field: string | null }
  | { t: 'huge'; field: string; bytes: number; unit: string }
  | { t: 'binary'; bytes: number[] };

/** Well-typed fields (typed) or anything in them, with missing and extra fields. */
function objectBody(fields: FieldSpec[], typed = false): fc.Arbitrary<Record<string, unknown>> {
  const present = fields.map((f) => fc.option(valueFor(f, typed), { nil: undefined, freq: 3 }).map((v) => [f.json, v] as const));
  const extra = fc.dictionary(fc.oneof(nastyString, fc.constantFrom('__proto__', 'constructor', 'prototype', 'id', 'organizationId', 'toolkit', 'url')), anyJson, { maxKeys: 3 });
  return fc.tuple(fc.tuple(...present), typed ? fc.constant(undefined) : fc.option(extra, { nil: undefined, freq: 2 }), fc.boolean()).map(([pairs, more, protoNames]) => {
    const body: Record<string, unknown> = {};
    for (const [name, value] of pairs) {
      if (value !== undefined) body[protoNames ? fields.find((f) => f.json === name)!.proto : name] = value;
    }
    if (more) for (const [name, value] of Object.entries(more)) Object.defineProperty(body, name, { value, enumerable: true, writable: true, configurable: true });
    return body;
  });
}

const INVALID_UTF8 = [[0xff], [0xfe], [0xc3, 0x28], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf0, 0x9f], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe2, 0x82]];

function bodyFor(fields: FieldSpec[], maxBytes: number): fc.Arbitrary<BodySpec> {
  const stringFields = fields.filter((f) => f.kind === 'string').map((f) => f.json);
  return fc.oneof(
    { weight: 5, arbitrary: objectBody(fields).map((value) => ({ t: 'object' as const, value })) },
    { weight: 5, arbitrary: objectBody(fields, true).map((value) => ({ t: 'object' as const, value })) },
    { weight: 2, arbitrary: anyJson.map((value) => ({ t: 'json' as const, value })) },
    {
      weight: 3,
      arbitrary: fc.oneof(
        // Truncated, duplicated, commented, BOM-prefixed and otherwise almost-JSON texts.
        objectBody(fields).chain((o) => fc.nat({ max: Math.max(0, JSON.stringify(o).length - 1) }).map((n) => JSON.stringify(o).slice(0, n))),
        fc.constantFrom(
          '{', '}', '{"a":}', '{"toolkit":"instagram",}', "{'toolkit':'instagram'}", '{"toolkit":"a" /* c */}', '\ufeff{}', '{}{}', '{} x',
          '{"toolkit":"a","toolkit":5}', '{"url":"http://a","url":"ftp://b"}', 'NaN', '[]', '""', '0', 'true', '{"a":1e999999}', '{"\\ud800":"\\udc00"}',
          '{"reason":"\\u0000"}', '{"confirmIdentity":tru}', '\u0000', '  ', '{"eventNames":[,]}', '{"text":"\\x41"}',
        ),
        fc.string({ unit: 'binary', maxLength: 200 }),
      ).map((text) => ({ t: 'text' as const, text })),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(objectBody(fields), fc.double({ min: 0, max: 1, noNaN: true }), fc.constantFrom(...INVALID_UTF8))
        .map(([base, at, bytes]) => ({ t: 'invalid-utf8' as const, base, at, bytes })),
    },
    {
      weight: 1,
      arbitrary: fc
        .record({ depth: fc.integer({ min: 1_000, max: 100_000 }), style: fc.constantFrom('array' as const, 'object' as const), field: fc.option(fc.constantFrom(...fields.map((f) => f.json), 'extra'), { nil: null }) })
        .map((d) => ({ t: 'deep' as const, ...d })),
    },
    {
      // Huge strings: a body of exactly the limit, one byte over, or somewhere below it.
      weight: 1,
      arbitrary: fc
        .record({
          field: fc.constantFrom(...(stringFields.length ? stringFields : ['extra'])),
          bytes: fc.oneof(fc.constantFrom(maxBytes, maxBytes + 1, maxBytes - 1, 2 * maxBytes), fc.integer({ min: 60_000, max: maxBytes })),
          unit: fc.constantFrom('x', 'é', '😀', '\\u0000', ' '),
        })
        .map((h) => ({ t: 'huge' as const, ...h })),
    },
    { weight: 1, arbitrary: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 300 }).map((bytes) => ({ t: 'binary' as const, bytes })) },
  );
}

/** Percent-encodes any string; lone surrogates (which have no UTF-8 form) become U+FFFD. */
function encode(text: string): string {
  return encodeURIComponent(text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'));
}

/** Path identifiers: random, hostile, long, unicode, broken encodings. */
const identifier = fc.oneof(
  fc.uuid().map(encode),
  fc.uuid().map((id) => id.toUpperCase()),
  nastyString.map(encode),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 30 }).map(encode),
  fc.constantFrom('..%2f..', '..%2F..%2Fconnections', '%2e%2e', '.', '..', '%00', '%', '%zz', '%E0%A4%A', '%ff%fe', '%c0%af', '%252f', ';', 'a;b=c', '~', '%20', '+', '*', 'null', 'undefined'),
  fc.integer({ min: 65, max: 8_000 }).map((n) => 'a'.repeat(n)),
  fc.integer({ min: 10, max: 2_000 }).map((n) => encode('é'.repeat(n))),
);

type PathTrick = 'none' | 'trailing-slash' | 'double-slash' | 'upper' | 'extra-segment' | 'missing-segment' | 'dot-segments' | 'encoded-slash';

function applyTrick(path: string, trick: PathTrick): string {
  switch (trick) {
    case 'none':
      return path;
    case 'trailing-slash':
      return `${path}/`;
    case 'double-slash':
      return path.replace(/\/(?=[^/]*$)/, '//');
    case 'upper':
      return path.toUpperCase();
    case 'extra-segment':
      return `${path}/extra`;
    case 'missing-segment':
      return path.split('/').slice(0, -1).join('/') || '/';
    case 'dot-segments':
      return path.replace('/api/v1/', '/api/v1/./x/../');
    case 'encoded-slash':
      return path.replace(/\/(?=[^/]*$)/, '%2F');
  }
}

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE'];
const CONTENT_TYPES = [
  'application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/json;charset=latin1', 'text/plain', '', 'application/jsonx',
  'application/json-patch+json', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded', 'application/grpc', 'application/proto',
  '*/*', 'application/json, text/plain',
];

type AuthSpec =
  | { t: 'none' }
  | { t: 'key'; key: CallerName; scheme: string; gap: string; tail: string }
  | { t: 'duplicate'; first: CallerName | 'garbage'; second: CallerName | 'garbage' }
  | { t: 'huge'; bytes: number }
  | { t: 'control'; key: CallerName; char: number; at: number }
  | { t: 'obs-text'; bytes: number[] }
  | { t: 'garbage'; value: string };

const keyName = fc.constantFrom<CallerName>('noScopes', 'noScopes', 'allScopes', 'revoked');
const auth: fc.Arbitrary<AuthSpec> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ t: 'none' as const }) },
  {
    weight: 10,
    arbitrary: fc
      .record({ key: keyName, scheme: fc.constantFrom('Bearer', 'Bearer', 'bearer', 'BEARER', 'Basic', 'Token', ''), gap: fc.constantFrom(' ', ' ', '  ', '\t', ''), tail: fc.constantFrom('', '', ' ', '\t', ' extra', 'x', '=') })
      .map((a) => ({ t: 'key' as const, ...a })),
  },
  { weight: 2, arbitrary: fc.record({ first: fc.constantFrom<CallerName | 'garbage'>('noScopes', 'allScopes', 'garbage'), second: fc.constantFrom<CallerName | 'garbage'>('noScopes', 'allScopes', 'garbage') }).map((a) => ({ t: 'duplicate' as const, ...a })) },
  { weight: 1, arbitrary: fc.integer({ min: 7_000, max: 9_000 }).map((bytes) => ({ t: 'huge' as const, bytes })) },
  { weight: 1, arbitrary: fc.record({ key: keyName, char: fc.oneof(fc.integer({ min: 0, max: 8 }), fc.integer({ min: 10, max: 31 }), fc.constant(127)), at: fc.nat({ max: 60 }) }).map((a) => ({ t: 'control' as const, ...a })) },
  { weight: 1, arbitrary: fc.array(fc.integer({ min: 0x80, max: 0xff }), { minLength: 1, maxLength: 20 }).map((bytes) => ({ t: 'obs-text' as const, bytes })) },
  { weight: 1, arbitrary: fc.oneof(nastyString, fc.constantFrom('Bearer', 'Bearer ', 'Bearer pk_live_', `Bearer pk_live_${'A'.repeat(43)}`, `Bearer pk_live_${'A'.repeat(200)}`)).map((value) => ({ t: 'garbage' as const, value })) },
);

/** A well-formed bearer header: such requests get past authentication and reach the handlers. */
const wellFormedAuth: fc.Arbitrary<AuthSpec> = fc
  .constantFrom<CallerName>('allScopes', 'allScopes', 'noScopes')
  .map((key) => ({ t: 'key' as const, key, scheme: 'Bearer', gap: ' ', tail: '' }));

interface CaseSpec {
  kind: 'route' | 'path' | 'method' | 'query' | 'headers';
  method: string;
  route: RouteSpec | null;
  path: string;
  query: readonly (readonly [string, string, boolean])[];
  auth: AuthSpec;
  contentType: string | null;
  body: BodySpec | null;
  chunked: boolean;
  extraHeaders: readonly (readonly [string, string])[];
  overHttp2: boolean;
}

function cases(maxBytes: number): fc.Arbitrary<CaseSpec> {
  const filled = (route: RouteSpec) => fc.tuple(identifier, identifier).map(([a]) => route.template.replace(/\{[a-z_]+\}/, a));
  const queryPairs = (fields: FieldSpec[]) =>
    fc.array(
      fc.tuple(
        fc.oneof(fc.constantFrom(...fields.flatMap((f) => [f.json, f.proto]), 'id', 'pageSize'), nastyString),
        fc.oneof(nastyString, fc.integer().map(String), fc.constantFrom('%ff', '%zz', '%', '%00', 'true', 'false', '-1', '2147483648', '1.5', 'a'.repeat(5_000))),
        fc.boolean(),
      ),
      { maxLength: 4 },
    );
  const extraHeaders = fc.array(
    fc.oneof(
      fc.tuple(fc.constant('x-request-id'), fc.oneof(nastyString.filter((s) => /^[\x20-\x7e]*$/.test(s)), fc.constantFrom('a'.repeat(65), 'ok-id', ''))),
      fc.tuple(fc.constant('content-encoding'), fc.constantFrom('gzip', 'br', 'identity', 'x')),
      fc.tuple(fc.constant('accept'), fc.constantFrom('application/grpc', 'text/html', '*/*')),
      fc.tuple(fc.constant('connect-protocol-version'), fc.constantFrom('1', '2')),
      fc.tuple(fc.constant('x-http-method-override'), fc.constantFrom('DELETE', 'GET')),
      fc.tuple(fc.constant('cookie'), fc.constant('a=b')),
    ),
    { maxLength: 3 },
  );
  const routeCase = fc.constantFrom(...ROUTES).chain((route) => {
    const fields = fieldsOf(route.template, route.verb);
    return fc.record({
      kind: fc.constant('route' as const),
      method: fc.constant(route.verb),
      route: fc.constant(route),
      path: filled(route),
      query: fc.oneof({ weight: 4, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: queryPairs(fields) }),
      auth: fc.oneof({ weight: 3, arbitrary: wellFormedAuth }, { weight: 1, arbitrary: auth }),
      contentType: fc.oneof({ weight: 6, arbitrary: fc.constant('application/json') }, { weight: 2, arbitrary: fc.constantFrom(...CONTENT_TYPES) }, { weight: 1, arbitrary: fc.constant(null) }),
      body: fc.oneof({ weight: route.verb === 'POST' ? 12 : 1, arbitrary: bodyFor(fields, maxBytes) }, { weight: 1, arbitrary: fc.constant(null) }),
      chunked: fc.nat({ max: 19 }).map((n) => n === 0),
      extraHeaders: fc.oneof({ weight: 4, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: extraHeaders }),
      overHttp2: fc.constant(false),
    });
  });
  const pathCase = fc.constantFrom(...ROUTES).chain((route) =>
    fc.record({
      kind: fc.constant('path' as const),
      method: fc.constant(route.verb),
      route: fc.constant(route),
      path: fc.tuple(filled(route), fc.constantFrom<PathTrick>('none', 'trailing-slash', 'double-slash', 'upper', 'extra-segment', 'missing-segment', 'dot-segments', 'encoded-slash')).map(([p, trick]) => applyTrick(p, trick)),
      query: fc.constant([]),
      auth,
      contentType: fc.constant('application/json'),
      body: route.verb === 'POST' ? bodyFor(fieldsOf(route.template, route.verb), maxBytes).filter((b) => b.t !== 'huge' && b.t !== 'deep') : fc.constant(null),
      chunked: fc.constant(false),
      extraHeaders: fc.constant([]),
      overHttp2: fc.constant(false),
    }),
  );
  const methodCase = fc.record({
    kind: fc.constant('method' as const),
    method: fc.constantFrom(...METHODS),
    route: fc.constant(null),
    path: fc.oneof(
      fc.constantFrom(...ROUTES).chain(filled),
      fc.constantFrom('/api/v1', '/api/v1/', '/api/v1//', '/api/v1/nope', '/api/v1/connections/x/y/z', '/api/v2/connections', '/api/v10/webhooks', '/api/v1%2fconnections', '/API/V1/connections', '/nope', '/'),
      fc.array(identifier, { minLength: 1, maxLength: 5 }).map((segments) => `/api/v1/${segments.join('/')}`),
    ),
    query: fc.constant([]),
    auth,
    contentType: fc.constantFrom('application/json', 'text/plain'),
    body: fc.option(fc.constantFrom<BodySpec>({ t: 'text', text: '{}' }, { t: 'text', text: '{"toolkit":"x"}' }, { t: 'binary', bytes: [0xff, 0x00] }), { nil: null }),
    chunked: fc.constant(false),
    extraHeaders: fc.constant([]),
    overHttp2: fc.constant(false),
  });
  const queryCase = fc.constantFrom(...ROUTES.filter((r) => r.verb === 'GET' || r.verb === 'DELETE')).chain((route) =>
    fc.record({
      kind: fc.constant('query' as const),
      method: fc.constant(route.verb),
      route: fc.constant(route),
      path: filled(route),
      query: queryPairs(fieldsOf(route.template, route.verb)).filter((q) => q.length > 0),
      auth: fc.oneof(wellFormedAuth, auth),
      contentType: fc.constant(null),
      body: fc.constant(null),
      chunked: fc.constant(false),
      extraHeaders: fc.constant([]),
      overHttp2: fc.constant(false),
    }),
  );
  const headerCase = fc.constantFrom(...ROUTES).chain((route) =>
    fc.record({
      kind: fc.constant('headers' as const),
      method: fc.constant(route.verb),
      route: fc.constant(route),
      path: filled(route),
      query: fc.constant([]),
      auth: auth.filter((a) => a.t !== 'key' && a.t !== 'none'),
      contentType: fc.oneof(fc.constantFrom(...CONTENT_TYPES), fc.integer({ min: 7_000, max: 8_192 }).map((n) => `application/json; x=${'a'.repeat(n)}`)),
      body: route.verb === 'POST' ? fc.constant<BodySpec>({ t: 'text', text: '{}' }) : fc.constant(null),
      chunked: fc.boolean(),
      extraHeaders,
      overHttp2: fc.constant(false),
    }),
  );
  return fc
    .tuple(
      fc.oneof({ weight: 10, arbitrary: routeCase }, { weight: 3, arbitrary: pathCase }, { weight: 2, arbitrary: methodCase }, { weight: 2, arbitrary: queryCase }, { weight: 3, arbitrary: headerCase }),
      fc.nat({ max: 9 }),
    )
    .map(([c, dice]) => ({ ...c, overHttp2: dice === 0 }));
}

// ---------------------------------------------------------------------------------------
// Turning a case into bytes

const CONNECTABLE = ['instagram', 'facebook', 'linkedin', 'youtube'];
/** Routes whose calls are audited once the caller is authenticated, refusals included. */
const AUDITED_ROUTES = [
  '/api/v1/connections/start',
  '/api/v1/connections/complete',
  '/api/v1/connections/{id}/confirm',
  '/api/v1/connections/{id}/disable',
  '/api/v1/connections/{connection_id}/release',
  '/api/v1/webhooks/{id}/pause',
  '/api/v1/webhooks/{id}/resume',
];
/**
 * Refusals that are not audited: of a path or method that names no RPC, of the caller
 * itself (there is no one to record), and of bytes the HTTP parser cannot read (no route or
 * caller is known). Every other refusal of an audited route is, the body's included.
 */
const BEFORE_AUDIT = new Set([
  'ROUTE_NOT_FOUND', 'METHOD_NOT_ALLOWED', 'AUTHENTICATION_REQUIRED', 'API_KEY_INVALID', 'API_KEY_REVOKED', 'MALFORMED_REQUEST', 'HEADERS_TOO_LARGE', 'REQUEST_TIMEOUT',
]);

/**
 * The all-scopes caller runs real handlers, so its payloads are made invalid by
 * construction: a start never names a connectable toolkit without also naming a
 * (missing) connection, a webhook URL never passes validation. A body that is not
 * harmless goes out with the no-scope key instead.
 */
function harmless(route: RouteSpec | null, body: Record<string, unknown>): boolean {
  if (!route) return true;
  if (route.template === '/api/v1/connections/start') {
    const toolkit = body.toolkit;
    const connectionId = body.connectionId ?? body.connection_id;
    return !(typeof toolkit === 'string' && CONNECTABLE.includes(toolkit) && !(typeof connectionId === 'string' && connectionId !== ''));
  }
  if (route.template === '/api/v1/webhooks' && route.verb === 'POST') {
    return !(typeof body.url === 'string' && validateEndpointUrl(body.url, { allowCidrs: t.config.delivery.allowCidrs }).ok);
  }
  return true;
}

function jsonBytes(spec: BodySpec): Buffer {
  switch (spec.t) {
    case 'object':
    case 'json':
      return Buffer.from(JSON.stringify(spec.value) ?? 'null');
    case 'text':
      return Buffer.from(spec.text);
    case 'invalid-utf8': {
      const text = Buffer.from(JSON.stringify(spec.base));
      const at = Math.floor(spec.at * text.length);
      return Buffer.concat([text.subarray(0, at), Buffer.from(spec.bytes), text.subarray(at)]);
    }
    case 'deep': {
      const open = spec.style === 'array' ? '['.repeat(spec.depth) : '{"a":'.repeat(spec.depth);
      const close = spec.style === 'array' ? ']'.repeat(spec.depth) : `1${'}'.repeat(spec.depth)}`;
      return Buffer.from(spec.field ? `{"${spec.field}":${open}${close}}` : `${open}${close}`);
    }
    case 'huge': {
      const head = `{"${spec.field}":"`;
      const tail = '"}';
      const unitBytes = Buffer.byteLength(spec.unit);
      const room = spec.bytes - head.length - tail.length;
      const repeat = Math.max(0, Math.floor(room / unitBytes));
      const padding = ' '.repeat(Math.max(0, room - repeat * unitBytes));
      return Buffer.from(`${head}${spec.unit.repeat(repeat)}${tail}${padding}`);
    }
    case 'binary':
      return Buffer.from(spec.bytes);
  }
}

/** What the JSON parser the gateway uses would make of the body, if it is an object. */
function parsedObject(bytes: Buffer): Record<string, unknown> | null {
  try {
    const value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as unknown;
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

interface Wire {
  spec: CaseSpec;
  key: CallerName | null;
  request: Buffer;
  h2: { headers: http2.OutgoingHttpHeaders; body: Buffer } | null;
  /** Node's HTTP parser refuses it (control characters, oversized head, unknown method, broken chunking) before any route sees it. */
  malformedHttp: boolean;
  bodyBytes: number;
}

function toWire(spec: CaseSpec): Wire {
  let body = spec.body ? jsonBytes(spec.body) : undefined;
  const keyOf = (name: CallerName | 'garbage') => (name === 'garbage' ? `pk_live_${'g'.repeat(43)}` : keys[name]);
  let key: CallerName | null = null;
  let authorization: string[] = [];
  let malformedHttp = false;
  const a = spec.auth;
  switch (a.t) {
    case 'none':
      break;
    case 'key':
      key = a.key;
      authorization = [`${a.scheme}${a.gap}${keys[a.key]}${a.tail}`];
      break;
    case 'duplicate':
      key = a.first === 'garbage' ? null : a.first;
      authorization = [`Bearer ${keyOf(a.first)}`, `Bearer ${keyOf(a.second)}`];
      if (a.second === 'allScopes') key = 'allScopes';
      break;
    case 'huge':
      authorization = [`Bearer ${'a'.repeat(a.bytes)}`];
      break;
    case 'control': {
      key = a.key;
      const value = `Bearer ${keys[a.key]}`;
      const at = Math.min(a.at, value.length);
      authorization = [`${value.slice(0, at)}${String.fromCharCode(a.char)}${value.slice(at)}`];
      malformedHttp = true;
      break;
    }
    case 'obs-text':
      authorization = [`Bearer ${Buffer.from(a.bytes).toString('latin1')}`];
      break;
    case 'garbage':
      authorization = [a.value];
      if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(a.value) || /[^\u0000-\u00ff]/.test(a.value)) malformedHttp = true;
      break;
  }
  // The all-scopes caller sends only bodies that cannot create anything.
  if (key === 'allScopes' && body !== undefined) {
    const parsed = parsedObject(body);
    if (parsed && !harmless(spec.route, parsed)) {
      authorization = authorization.map((v) => v.replace(keys.allScopes, keys.noScopes));
      key = 'noScopes';
    }
  }
  // Raw pairs go out unencoded (broken percent-encoding, CR LF injection) as long as they are latin1.
  const query = spec.query
    .map(([name, value, raw]) => (raw && /^[\x00-\xff]*$/.test(name + value) ? `${name}=${value}` : `${encode(name)}=${encode(value)}`))
    .join('&');
  const target = query ? `${spec.path}?${query}` : spec.path;
  const headers: [string, string][] = authorization.map((v) => ['Authorization', v]);
  if (spec.contentType !== null) headers.push(['Content-Type', spec.contentType]);
  headers.push(...spec.extraHeaders.map(([n, v]): [string, string] => [n, v]));
  if (spec.chunked && body !== undefined) {
    headers.push(['Transfer-Encoding', 'chunked']);
    const chunks: Buffer[] = [];
    for (let offset = 0; offset < body.length; offset += 65_536) {
      const chunk = body.subarray(offset, offset + 65_536);
      chunks.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
    }
    chunks.push(Buffer.from('0\r\n\r\n'));
    body = Buffer.concat(chunks);
  }
  const request = http1Request(spec.method, target, headers, body);
  const headLength = request.indexOf('\r\n\r\n');
  if (headLength > NODE_MAX_HEADER_BYTES - 64) malformedHttp = true;
  if (/[^\x21-\x7e]/.test(target)) malformedHttp = true;
  if (headers.some(([, v]) => /[^\x09\x20-\x7e\x80-\xff]/.test(v))) malformedHttp = true;

  const printable = (v: string) => /^[\x20-\x7e]*$/.test(v);
  const canUseH2 =
    spec.overHttp2 && !malformedHttp && !spec.chunked && authorization.length <= 1 && headers.every(([, v]) => printable(v)) && spec.method !== 'TRACE' && printable(target);
  const h2 = canUseH2
    ? {
        headers: Object.fromEntries([
          [':method', spec.method],
          [':path', target],
          ...headers.filter(([n]) => !/^(connection|transfer-encoding)$/i.test(n)).map(([n, v]) => [n.toLowerCase(), v]),
        ]) as http2.OutgoingHttpHeaders,
        body: body ?? Buffer.alloc(0),
      }
    : null;
  return { spec, key, request, h2, malformedHttp, bodyBytes: body?.length ?? 0 };
}

// ---------------------------------------------------------------------------------------
// Judging an answer

function problemWith(wire: Wire, response: RawResponse): string | null {
  const { spec } = wire;
  // Bytes that are not an HTTP/1.1 request are refused like any other request: answered, with a code.
  if (response.incomplete) return `no answer: ${response.error ?? 'incomplete response'}`;
  if (response.status >= 500) return `server fault ${response.status}: ${response.body.toString('utf8').slice(0, 200)}`;
  if (response.status < 400) {
    const isRead = spec.method === 'GET' && (spec.route?.reads ?? true);
    return isRead ? null : `a hostile ${spec.method} ${spec.path.slice(0, 80)} succeeded with ${response.status}`;
  }
  // A body is checked for UTF-8 before it is parsed: one that is not is never refused as JSON.
  if (spec.body?.t === 'invalid-utf8' && codeOf(response) === 'MALFORMED_JSON') return 'a body that is not UTF-8 was refused MALFORMED_JSON, not INVALID_UTF8';
  return codeProblem(spec, response);
}

/**
 * Problems with the code and request id of a refusal. An answer to HEAD has no body, so its
 * headers say it: `x-error-code` and `x-request-id` (the parser's refusals come before the
 * method is known, and have a body).
 */
function codeProblem(spec: CaseSpec, response: RawResponse): string | null {
  if (spec.method === 'HEAD' && response.body.length === 0) {
    if (!response.headers['content-type']?.[0]?.startsWith('application/json')) return 'HEAD refusal is not JSON';
    if (!response.headers['x-request-id']?.[0]) return 'HEAD refusal without x-request-id';
    return response.headers['x-error-code']?.[0] ? null : 'HEAD refusal without x-error-code';
  }
  return restErrorProblem(response);
}

/** The stable code of a JSON error answer, or ''. */
function codeOf(response: RawResponse): string {
  try {
    return (JSON.parse(response.body.toString('utf8')) as { code?: string }).code ?? '';
  } catch {
    return '';
  }
}

// ---------------------------------------------------------------------------------------

it(
  'answers thousands of malformed REST requests with documented refusals, keeps serving, and stores nothing',
  async () => {
    // The README's route table is the gateway's route table.
    expect(t.app.gateway.describe().map((r) => `${r.verb} ${r.template}`).sort()).toEqual(ROUTES.map((r) => `${r.verb} ${r.template}`).sort());
    const maxBytes = t.config.maxBodyBytes;
    const before = await snapshotDomain(t);
    const auditMark = await auditHighWater(t);

    const seed = ROBUSTNESS_SEED;
    const specs = fc.sample(cases(maxBytes), { numRuns: TOTAL_REQUESTS, seed });
    const failures: { problem: string; spec: string }[] = [];
    const statuses = new Map<string, number>();
    const byKind = new Map<string, number>();
    const audited: { requestId: string; code: string }[] = [];
    let overHttp2 = 0;
    let parserRefusals = 0;
    const perTransport: Record<string, { requests: number; serverFaults: number; uncoded: number }> = {};
    let hugeBodies = 0;

    const session = http2.connect(t.url);
    session.on('error', () => undefined);
    try {
      await inPool(specs, CONCURRENCY, async (spec, index) => {
        const wire = toWire(spec);
        let response: RawResponse;
        if (wire.h2) {
          overHttp2++;
          const answer = await rawH2(session, wire.h2.headers, wire.h2.body);
          response = {
            status: answer.status,
            headers: Object.fromEntries(Object.entries(answer.headers).map(([n, v]) => [n, Array.isArray(v) ? v : [String(v)]])),
            body: answer.body,
            incomplete: answer.status === 0 || answer.error !== undefined,
            ...(answer.error ? { error: answer.error } : {}),
          };
        } else {
          response = await rawHttp1(t.url, wire.request);
        }
        if (wire.bodyBytes >= 60_000) hugeBodies++;
        byKind.set(spec.kind, (byKind.get(spec.kind) ?? 0) + 1);
        const code = codeOf(response);
        const over = wire.h2 ? 'h2c' : 'HTTP/1.1';
        const tally = (perTransport[over] ??= { requests: 0, serverFaults: 0, uncoded: 0 });
        tally.requests++;
        if (response.status >= 500) tally.serverFaults++;
        if (response.incomplete || (response.status >= 300 && codeProblem(spec, response) !== null)) tally.uncoded++;
        if (wire.malformedHttp && /^(MALFORMED_REQUEST|HEADERS_TOO_LARGE|REQUEST_TIMEOUT)$/.test(code)) parserRefusals++;
        const label = `${response.status}${code ? ` ${code}` : ''}`;
        if (spec.route && AUDITED_ROUTES.includes(spec.route.template) && spec.route.verb === spec.method && code && !BEFORE_AUDIT.has(code)) {
          audited.push({ requestId: response.headers['x-request-id']?.[0] ?? '', code });
        }
        statuses.set(label, (statuses.get(label) ?? 0) + 1);
        const problem = problemWith(wire, response);
        if (problem) {
          const shown = { ...spec, body: spec.body && (spec.body.t === 'huge' || spec.body.t === 'deep') ? spec.body : spec.body && JSON.stringify(spec.body).slice(0, 300) };
          failures.push({ problem, spec: `#${index} ${JSON.stringify(shown).slice(0, 600)}` });
        }
        if (index % 1_000 === 999 && (await stillAlive(t)) !== 200) failures.push({ problem: 'the server stopped answering /healthz', spec: `after #${index}` });
      });
    } finally {
      session.close();
    }

    const after = await snapshotDomain(t);
    const audit = await auditEventsSince(t, auditMark);
    const recorded = new Set(
      (await t.orm.em.fork().execute<{ request_id: string; reason: string }[]>("select request_id, reason from audit_events where id > ? and outcome = 'refused'", [auditMark])).map(
        (r) => `${r.request_id} ${r.reason}`,
      ),
    );
    const unaudited = audited.filter((a) => !recorded.has(`${a.requestId} ${a.code}`));
    console.log(
      [
        `hostile REST: ${specs.length} requests generated (seed ${seed}; ${overHttp2} over h2c, ${hugeBodies} bodies of 60 KB to 2 MiB, ${parserRefusals} refused by the HTTP parser)`,
        `by kind: ${JSON.stringify(Object.fromEntries(byKind))}`,
        `by transport (requests, 5xx, non-2xx answers without a code and request id): ${JSON.stringify(perTransport)}`,
        `answers: ${JSON.stringify(Object.fromEntries([...statuses].sort((x, y) => y[1] - x[1])))}`,
        `audit events added: ${audit.length} (${audit.filter((e) => e.outcome === 'succeeded').length} succeeded); audited refusals checked: ${audited.length}, missing: ${unaudited.length}`,
        `failures: ${failures.length}`,
        ...failures.slice(0, 25).map((f) => `  ${f.problem}\n    ${f.spec}`),
      ].join('\n'),
    );

    expect(failures).toEqual([]);
    // Some bodies that are not UTF-8 reached a route that reads its body, and were refused as such.
    expect(statuses.get('400 INVALID_UTF8') ?? 0).toBeGreaterThan(0);
    expect(await stillAlive(t)).toBe(200);
    expect(after).toEqual(before);
    expect(audit.filter((e) => e.outcome !== 'refused')).toEqual([]);
    // Every refusal of an audited action that got past authentication is in the trail.
    expect(unaudited).toEqual([]);
    // The service still works for a well-formed call afterwards.
    const list = await rawHttp1(t.url, http1Request('GET', '/api/v1/connections', [['Authorization', `Bearer ${keys.allScopes}`]]));
    expect(list.status).toBe(200);
  },
  120_000,
);

it('refuses a body field that is not UTF-8 on every route that takes a body with 400 INVALID_UTF8, over HTTP/1.1 and h2c, storing nothing', async () => {
  const before = await snapshotDomain(t);
  const routes = t.app.gateway.describe().filter((r) => r.bodyAll);
  expect(routes.length).toBeGreaterThan(0);
  const cases = fc.sample(
    fc.tuple(fc.constantFrom(...routes), fc.constantFrom(...INVALID_UTF8), fc.constantFrom('h1', 'h2c'), fc.uuid()),
    { numRuns: 60, seed: ROBUSTNESS_SEED },
  );
  const failures: string[] = [];
  const session = http2.connect(t.url).on('error', () => undefined);
  try {
    for (const [route, bytes, over, id] of cases) {
      const field = fieldsOf(route.template, route.verb).find((f) => f.kind === 'string' || f.kind === 'strings');
      if (!field) continue;
      const text = Buffer.from(JSON.stringify({ [field.json]: field.kind === 'strings' ? ['x@@y'] : 'x@@y' }));
      const at = text.indexOf('@@');
      const body = Buffer.concat([text.subarray(0, at), Buffer.from(bytes), text.subarray(at + 2)]);
      const path = route.template.replace(/\{[a-z_]+\}/g, id);
      const headers = { authorization: `Bearer ${keys.allScopes}`, 'content-type': 'application/json' };
      const response =
        over === 'h1'
          ? await rawHttp1(t.url, http1Request(route.verb, path, Object.entries(headers), body))
          : await rawH2(session, { ':method': route.verb, ':path': path, ...headers }, body).then((a) => ({ status: a.status, body: a.body }));
      const answer = `${response.status} ${(JSON.parse(response.body.toString('utf8')) as { code?: string }).code ?? ''}`;
      if (answer !== '400 INVALID_UTF8') failures.push(`${over} ${route.verb} ${route.template} ${field.json} [${bytes.map((b) => b.toString(16)).join(' ')}]: ${answer}`);
    }
  } finally {
    session.close();
  }
  expect(failures).toEqual([]);
  expect(await snapshotDomain(t)).toEqual(before);
});

it('answers forged page tokens on every list route with PAGE_TOKEN_INVALID or a page, never a server fault (REST and gRPC)', async () => {
  const grpc = createClient(ConnectionService, transport(t.url, 'grpc', keys.allScopes));
  const grpcWebhooks = createClient(WebhookService, transport(t.url, 'grpc', keys.allScopes));
  const grpcPosts = createClient(PostService, transport(t.url, 'grpc', keys.allScopes));
  const lists: [string, string, (pageToken: string) => Promise<unknown>][] = [
    ['ListConnections', '/api/v1/connections', (pageToken) => grpc.listConnections({ pageToken })],
    ['ListWebhooks', '/api/v1/webhooks', (pageToken) => grpcWebhooks.listWebhooks({ pageToken })],
    ['ListPosts', '/api/v1/posts', (pageToken) => grpcPosts.listPosts({ pageToken })],
  ];
  // Tokens are base64url JSON {at, id}: forge the fields, not just the encoding.
  const forged = fc
    .record({
      at: fc.oneof(
        fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
        fc.constantFrom('+275760-09-13T00:00:00.000Z', '-271821-04-20T00:00:00.000Z', '+010000-01-01T00:00:00.000Z', '0000-01-01T00:00:00Z', '1', '2026', 'Tue, 01 Jan 2030 00:00:00 GMT', '2026-11-21T10:00:00+14:00'),
      ),
      id: fc.oneof(fc.uuid(), fc.string({ maxLength: 40 }).map((s) => s.replaceAll('\u0000', '')), fc.constantFrom('', 'x', '0', '00000000-0000-0000-0000-00000000000g', "' or 1=1 --")),
    })
    .map((cursor) => Buffer.from(JSON.stringify(cursor)).toString('base64url'));
  const seed = ROBUSTNESS_SEED;
  const tokens = fc.sample(forged, { numRuns: 100, seed });
  const failures = new Map<string, string[]>();
  let calls = 0;
  await inPool(tokens, 4, async (pageToken) => {
    for (const [name, path, viaGrpc] of lists) {
      calls += 2;
      const viaRest = await rawHttp1(t.url, http1Request('GET', `${path}?pageToken=${pageToken}`, [['Authorization', `Bearer ${keys.allScopes}`]]));
      const restCode = viaRest.status === 200 ? 'page' : (JSON.parse(viaRest.body.toString('utf8')) as { code: string }).code;
      if (!(restCode === 'page' || (viaRest.status === 400 && restCode === 'PAGE_TOKEN_INVALID'))) {
        failures.set(`REST ${name}`, [...(failures.get(`REST ${name}`) ?? []), `${Buffer.from(pageToken, 'base64url').toString()} → ${viaRest.status} ${restCode}`]);
      }
      let grpcCode = 'page';
      try {
        await viaGrpc(pageToken);
      } catch (error) {
        const e = ConnectError.from(error);
        grpcCode = `${Code[e.code]} ${e.findDetails(ErrorInfoSchema)[0]?.reason ?? ''}`;
      }
      if (!(grpcCode === 'page' || grpcCode === 'InvalidArgument PAGE_TOKEN_INVALID')) {
        failures.set(`gRPC ${name}`, [...(failures.get(`gRPC ${name}`) ?? []), `${Buffer.from(pageToken, 'base64url').toString()} → ${grpcCode}`]);
      }
    }
  });
  console.log(
    `forged page tokens: ${tokens.length} tokens, ${calls} calls (seed ${seed}); failing routes: ${JSON.stringify(Object.fromEntries([...failures].map(([route, list]) => [route, `${list.length} e.g. ${list[0]}`])))}`,
  );
  expect([...failures.keys()]).toEqual([]);
});
