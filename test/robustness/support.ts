/**
 * Shared by the robustness suites: snapshots of the stored domain rows, raw HTTP/1.1 and
 * HTTP/2 clients that send exactly the bytes a hostile client would (fetch and the
 * generated clients refuse most of them), and the checks every error answer must pass.
 */
import net from 'node:net';
import http2 from 'node:http2';
import { fromBinary } from '@bufbuild/protobuf';
import { Code } from '@connectrpc/connect';
import { codeFromString } from '@connectrpc/connect/protocol-connect';
import { ErrorInfoSchema, type ErrorInfo } from '../../src/gen/google/rpc/error_details_pb';
import { findTrailerError } from '@connectrpc/connect/protocol-grpc';
import { ERRORS } from '../../src/errors';
import { revokeApiKey } from '../../src/auth';
import type { TestApp } from '../support/app';

/** The domain tables and how a row is fingerprinted (api_keys.last_used_at moves on every authenticated call). */
const DOMAIN_TABLES: Record<string, string> = {
  organizations: 't::text',
  users: 't::text',
  api_keys: "(to_jsonb(t) - 'last_used_at')::text",
  connections: 't::text',
  connection_attempts: 't::text',
  posts: 't::text',
  webhook_endpoints: 't::text',
  // The statistics roll-up pass (every API instance, in the background) marks finished
  // deliveries as counted: its bookkeeping, not a change any request made.
  webhook_deliveries: "(to_jsonb(t) - 'statistics_series' - 'statistics_status')::text",
  delivery_attempts: 't::text',
  dead_letters: 't::text',
  kill_switches: 't::text',
  delivery_usage: 't::text',
};

export type Snapshot = Record<string, { rows: number; md5: string | null }>;

/** Row count and an md5 over every row of each domain table. */
export async function snapshotDomain(t: TestApp): Promise<Snapshot> {
  const em = t.orm.em.fork();
  const snapshot: Snapshot = {};
  for (const [table, row] of Object.entries(DOMAIN_TABLES)) {
    const [result] = await em.execute<{ rows: string; md5: string | null }[]>(
      `select count(*)::text as rows, md5(string_agg(${row}, ',' order by ${row})) as md5 from ${table} t`,
    );
    snapshot[table] = { rows: Number(result?.rows ?? 0), md5: result?.md5 ?? null };
  }
  return snapshot;
}

/** The same fingerprint restricted to the rows of one organization. */
export async function snapshotOrganization(t: TestApp, organizationId: string): Promise<Snapshot> {
  const scoped: Record<string, string> = {
    organizations: 'id = $1',
    users: 'organization_id = $1',
    api_keys: 'organization_id = $1',
    connections: 'organization_id = $1',
    connection_attempts: 'organization_id = $1',
    posts: 'organization_id = $1',
    webhook_endpoints: 'organization_id = $1',
    webhook_deliveries: 'organization_id = $1',
    delivery_attempts: 'delivery_id in (select id from webhook_deliveries where organization_id = $1)',
    dead_letters: 'organization_id = $1',
    kill_switches: 'scope = $1::text',
    delivery_usage: 'organization_id = $1',
  };
  const em = t.orm.em.fork();
  const snapshot: Snapshot = {};
  for (const [table, row] of Object.entries(DOMAIN_TABLES)) {
    const [result] = await em
      .getConnection()
      .execute<{ rows: string; md5: string | null }[]>(
        `select count(*)::text as rows, md5(string_agg(${row}, ',' order by ${row})) as md5 from ${table} t where ${scoped[table]!.replaceAll('$1', '?')}`,
        Array.from({ length: (scoped[table]!.match(/\$1/g) ?? []).length }, () => organizationId),
      );
    snapshot[table] = { rows: Number(result?.rows ?? 0), md5: result?.md5 ?? null };
  }
  return snapshot;
}

/** The id of the newest audit event; later events are read relative to it. */
export async function auditHighWater(t: TestApp): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ id: string | null }[]>('select max(id)::text as id from audit_events');
  return Number(row?.id ?? 0);
}

export async function auditEventsSince(
  t: TestApp,
  mark: number,
): Promise<{ organization_id: string | null; action: string; outcome: string; reason: string | null }[]> {
  return t.orm.em
    .fork()
    .execute('select organization_id, action, outcome, reason from audit_events where id > ? order by id', [mark]);
}

/** Runs `fn` over `items` with at most `concurrency` in flight. */
export async function inPool<T>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      await fn(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
}

// ---------------------------------------------------------------------------------------
// Raw HTTP/1.1

export interface RawResponse {
  status: number;
  headers: Record<string, string[]>;
  body: Buffer;
  /** The server answered something that is not a complete HTTP response (or nothing). */
  incomplete: boolean;
  error?: string;
}

/**
 * Sends the bytes as they are over a fresh connection and reads the one answer. The
 * request should carry `Connection: close`; the answer is parsed as soon as it is
 * complete, so a server that resets the socket after answering still gives its answer.
 */
export function rawHttp1(baseUrl: string, request: Buffer, timeoutMs = 30_000): Promise<RawResponse> {
  const url = new URL(baseUrl);
  return new Promise((resolve) => {
    const socket = net.connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    let settled = false;
    const settle = (error?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const parsed = parseHttp1(Buffer.concat(chunks));
      resolve(error && parsed.incomplete ? { ...parsed, error } : parsed);
    };
    const timer = setTimeout(() => settle(`no complete answer within ${timeoutMs} ms`), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (!parseHttp1(Buffer.concat(chunks)).incomplete) settle();
    });
    socket.on('error', (error) => settle(error.message));
    socket.on('close', () => settle('connection closed'));
    // The server may answer and close before the whole body is written; that is allowed.
    socket.write(request, () => undefined);
  });
}

function parseHttp1(data: Buffer): RawResponse {
  const incomplete: RawResponse = { status: 0, headers: {}, body: Buffer.alloc(0), incomplete: true };
  const end = data.indexOf('\r\n\r\n');
  if (end < 0) return incomplete;
  const [statusLine = '', ...lines] = data.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers: Record<string, string[]> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    (headers[name] ??= []).push(line.slice(colon + 1).trim());
  }
  let rest = data.subarray(end + 4);
  if (headers['transfer-encoding']?.some((v) => /chunked/i.test(v))) {
    const body: Buffer[] = [];
    for (;;) {
      const lineEnd = rest.indexOf('\r\n');
      if (lineEnd < 0) return incomplete;
      const size = parseInt(rest.subarray(0, lineEnd).toString('latin1'), 16);
      if (Number.isNaN(size)) return incomplete;
      if (size === 0) return { status, headers, body: Buffer.concat(body), incomplete: false };
      if (rest.length < lineEnd + 2 + size + 2) return incomplete;
      body.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
      rest = rest.subarray(lineEnd + 2 + size + 2);
    }
  }
  const length = headers['content-length'] ? Number(headers['content-length'][0]) : 0;
  if (rest.length < length) return incomplete;
  return { status, headers, body: rest.subarray(0, length), incomplete: false };
}

/** A request as bytes; header values are written as latin1 so any byte can be sent. */
export function http1Request(method: string, target: string, headers: [string, string][], body?: Buffer): Buffer {
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: robustness.test', ...headers.map(([n, v]) => `${n}: ${v}`), 'Connection: close'];
  if (body !== undefined && !headers.some(([n]) => /^(content-length|transfer-encoding)$/i.test(n))) {
    lines.push(`Content-Length: ${body.length}`);
  }
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body ?? Buffer.alloc(0)]);
}

// ---------------------------------------------------------------------------------------
// Raw HTTP/2

export interface RawH2Response {
  status: number;
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
  /** Stream or session error, or no answer in time. */
  error?: string;
}

/** One request on an HTTP/2 session; resolves once the answer (trailers included) is in. */
export function rawH2(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body: Buffer, timeoutMs = 30_000): Promise<RawH2Response> {
  return new Promise((resolve) => {
    const result: RawH2Response = { status: 0, headers: {}, trailers: {}, body: Buffer.alloc(0) };
    const chunks: Buffer[] = [];
    let settled = false;
    const settle = (error?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      result.body = Buffer.concat(chunks);
      if (error) result.error = error;
      resolve(result);
    };
    // Only a stream that gets no answer is cancelled: resetting answered streams looks like a rapid-reset attack.
    const timer = setTimeout(() => {
      settle(`no answer within ${timeoutMs} ms`);
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    }, timeoutMs);
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: body.length === 0 });
    } catch (error) {
      clearTimeout(timer);
      resolve({ ...result, error: `client refused to send: ${(error as Error).message}` });
      return;
    }
    stream.on('response', (h) => {
      result.headers = h;
      result.status = Number(h[':status']);
    });
    stream.on('trailers', (tr) => {
      result.trailers = tr;
      settle();
    });
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => settle());
    stream.on('error', (error) => settle(`stream error: ${error.message}`));
    stream.on('close', () => settle(stream.rstCode && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR ? `stream reset ${stream.rstCode}` : undefined));
    if (body.length > 0) stream.end(body);
  });
}

// ---------------------------------------------------------------------------------------
// What every error answer must look like

/** gRPC codes a refusal of a hostile request may carry; the rest mean the server failed. */
const CLIENT_FAULT_CODES = new Set<Code>([
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.FailedPrecondition,
  Code.ResourceExhausted,
  Code.OutOfRange,
]);

export interface GrpcExpectations {
  /** Codes this particular request may legitimately get beyond the client-fault ones (e.g. Unimplemented for an unknown encoding). */
  alsoAllowed?: readonly Code[];
}

/** Problems with a gRPC/Connect refusal: its code, and the ErrorInfo every refusal carries. */
export function grpcRefusalProblem(code: Code, info: ErrorInfo | undefined, expect: GrpcExpectations = {}): string | null {
  if (!CLIENT_FAULT_CODES.has(code) && !expect.alsoAllowed?.includes(code)) return `gRPC code ${Code[code] ?? code} is not a refusal of the request`;
  if (!info) return `${Code[code]} without an ErrorInfo (no stable code)`;
  if (!(info.reason in ERRORS)) return `ErrorInfo reason ${info.reason} is not a documented code`;
  const [expected] = ERRORS[info.reason as keyof typeof ERRORS];
  if (expected !== code) return `ErrorInfo ${info.reason} travels as ${Code[code]}, documented as ${Code[expected]}`;
  return null;
}

/** Problems with the request id a refusal carries back: the one the client sent (ours are always valid). */
export function requestIdProblem(sent: string, returned: string | null | undefined): string | null {
  if (!returned) return 'a refusal without its request id';
  return returned === sent ? null : `request id ${returned} in place of ${sent}`;
}

/**
 * The gRPC status of an answer from its trailers (or its headers for a trailers-only
 * answer): null when the call succeeded, 'missing' when there is no grpc-status at all.
 */
export function grpcStatusOf(fields: Record<string, string | string[] | undefined>): null | 'missing' | { code: Code; info: ErrorInfo | undefined; message: string } {
  const header = new Headers();
  for (const [name, value] of Object.entries(fields)) {
    if (name.startsWith(':') || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) header.append(name, v);
  }
  if (!header.has('grpc-status')) return 'missing';
  const error = findTrailerError(header);
  if (!error) return null;
  return { code: error.code, info: error.findDetails(ErrorInfoSchema)[0], message: error.rawMessage };
}

/** ErrorInfo inside a Connect JSON error body. */
export function errorInfoFromConnectJson(body: { details?: { type?: string; value?: string }[] }): ErrorInfo | undefined {
  const detail = body.details?.find((d) => d.type === 'google.rpc.ErrorInfo');
  return detail?.value ? fromBinary(ErrorInfoSchema, Buffer.from(detail.value, 'base64')) : undefined;
}

/**
 * Problems with a Connect-protocol error answer (JSON body with a Connect code), or with
 * the REST-style answer to a request that is no RPC or that no protocol takes.
 */
export function connectErrorProblem(response: { status: number; body: Buffer; headers: Record<string, string[]> }, expect: GrpcExpectations = {}): string | null {
  let parsed: { code?: unknown; message?: unknown; details?: { type?: string; value?: string }[] };
  try {
    parsed = JSON.parse(response.body.toString('utf8')) as typeof parsed;
  } catch {
    return `HTTP ${response.status} without a JSON error body: ${JSON.stringify(response.body.toString('utf8').slice(0, 120))}`;
  }
  if (typeof parsed.code !== 'string') return `HTTP ${response.status} error body without a string code`;
  const code = codeFromString(parsed.code);
  if (code === undefined) {
    // The REST-style answer on paths that are not RPCs, and to methods and content types no protocol takes.
    if (parsed.code in ERRORS) return restErrorProblem(response);
    return `HTTP ${response.status} error code ${parsed.code} is neither a Connect code nor a documented one`;
  }
  return grpcRefusalProblem(code, errorInfoFromConnectJson(parsed), expect);
}

/**
 * Problems with a REST-style error answer (the gateway's, and the listener's for requests
 * no protocol takes): JSON with a documented code, a message, and the request id, which the
 * x-request-id header repeats.
 */
export function restErrorProblem(response: { status: number; body: Buffer; headers: Record<string, string[]> }): string | null {
  let parsed: { code?: unknown; message?: unknown; requestId?: unknown };
  try {
    parsed = JSON.parse(response.body.toString('utf8')) as typeof parsed;
  } catch {
    return `HTTP ${response.status} without a JSON body: ${JSON.stringify(response.body.toString('latin1').slice(0, 120))}`;
  }
  if (typeof parsed.code !== 'string' || typeof parsed.message !== 'string') return `HTTP ${response.status} body lacks string code and message`;
  if (!(parsed.code in ERRORS)) return `code ${parsed.code} is not documented`;
  if (ERRORS[parsed.code as keyof typeof ERRORS][1] !== response.status) return `${parsed.code} answered with HTTP ${response.status}`;
  if (typeof parsed.requestId !== 'string' || parsed.requestId === '') return `${parsed.code} without a request id`;
  if (response.headers['x-request-id']?.[0] !== parsed.requestId) return `${parsed.code}: x-request-id ${String(response.headers['x-request-id']?.[0])} is not the body's ${parsed.requestId}`;
  return null;
}

export type CallerName = 'noScopes' | 'allScopes' | 'revoked';

/**
 * The API keys every hostile request is made as: one lacking every scope (refused before a
 * handler runs), one with every scope in an organization with no rows (handlers run, on
 * payloads invalid by construction), and one revoked.
 */
export async function hostileCallers(t: TestApp): Promise<Record<CallerName, string>> {
  const noScopes = (await t.tenant({ scopes: [] })).apiKey;
  const allScopes = (await t.tenant()).apiKey;
  const revoked = await t.tenant();
  await revokeApiKey(t.orm.em.fork(), revoked.keyId);
  return { noScopes, allScopes, revoked: revoked.apiKey };
}

/**
 * The seed of every generated request set: fixed, so each run (CI's included) sends the
 * same requests and a failure can be replayed; set ROBUSTNESS_SEED to explore others.
 */
export const ROBUSTNESS_SEED = Number(process.env.ROBUSTNESS_SEED ?? 20_261_121);

/** The server still answers its liveness probe. */
export async function stillAlive(t: TestApp): Promise<number> {
  const response = await fetch(`${t.url}/healthz`);
  return response.status;
}
