/**
 * Drives the connection routes the way a customer does, over REST or RPC (gRPC over the
 * socket of a listening test app, in process otherwise), so each rule can be written once
 * and proven on both:
 *
 *   describe.each(TRANSPORTS)('over %s', (transport) => {
 *     it('...', async () => {
 *       const api = connectionsApi(t, transport);
 *       const { connection } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery');
 *       await expectRefusal(api.confirm(owner.apiKey, connection!.id, false), 'CONFIRMATION_REQUIRED');
 *     });
 *   });
 *
 * Successful answers come back as the generated messages on both transports (REST JSON is
 * parsed with `fromJson`, which also proves it is valid proto3 JSON). Refusals come back as
 * a `Refusal` carrying what the client saw: the HTTP status and body `code` on REST, the
 * gRPC status and the ErrorInfo reason on gRPC.
 */
import { randomUUID } from 'node:crypto';
import { fromJson, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import {
  CompleteConnectionResponseSchema,
  ConfirmConnectionResponseSchema,
  ConnectionService,
  DisableConnectionResponseSchema,
  ListConnectionsResponseSchema,
  StartConnectionResponseSchema,
  type CompleteConnectionResponse,
  type ConfirmConnectionResponse,
  type Connection,
  type DisableConnectionResponse,
  type ListConnectionsResponse,
  type StartConnectionResponse,
} from '../../src/gen/publishing/v1/connection_service_pb';
import {
  ListPostsResponseSchema,
  PostService,
  ReleaseHeldPostsResponseSchema,
  SchedulePostResponseSchema,
  type ListPostsResponse,
  type ReleaseHeldPostsResponse,
  type SchedulePostResponse,
} from '../../src/gen/publishing/v1/post_service_pb';
import type { TestApp } from '../support/app';

export const TRANSPORTS = ['rest', 'grpc'] as const;
export type TransportUnderTest = (typeof TRANSPORTS)[number];

/**
 * The contract for each refusal the connection routes give: HTTP status on REST and gRPC
 * status on gRPC. Written out here rather than read from src/errors, so that a changed
 * mapping fails the tests.
 */
export const REFUSALS = {
  CAPABILITY_UNSUPPORTED: [422, Code.FailedPrecondition],
  CONNECTION_NOT_FOUND: [404, Code.NotFound],
  STATE_INVALID: [400, Code.InvalidArgument],
  STATE_EXPIRED: [410, Code.FailedPrecondition],
  STATE_USER_MISMATCH: [403, Code.PermissionDenied],
  STATE_ORGANIZATION_MISMATCH: [403, Code.PermissionDenied],
  STATE_ALREADY_USED: [409, Code.AlreadyExists],
  CONNECTED_ACCOUNT_REQUIRED: [400, Code.InvalidArgument],
  ACCOUNT_REGISTERED_ELSEWHERE: [409, Code.AlreadyExists],
  ACCOUNT_ALREADY_CONNECTED: [409, Code.AlreadyExists],
  CONFIRMATION_REQUIRED: [400, Code.InvalidArgument],
  PROVIDER_ACCOUNT_NOT_FOUND: [422, Code.FailedPrecondition],
  PROVIDER_ACCOUNT_MISMATCH: [422, Code.FailedPrecondition],
  OWNER_OR_ADMIN_REQUIRED: [403, Code.PermissionDenied],
  DISABLE_REASON_REQUIRED: [400, Code.InvalidArgument],
  DISABLE_REASON_TOO_LONG: [400, Code.InvalidArgument],
  PERMISSION_DENIED: [403, Code.PermissionDenied],
  SCOPE_MISSING: [403, Code.PermissionDenied],
  DESTINATION_NOT_VERIFIED: [409, Code.FailedPrecondition],
  DESTINATION_NOT_VERIFIED_FOR_RELEASE: [409, Code.FailedPrecondition],
  CONNECTION_DISCONNECTED: [409, Code.FailedPrecondition],
} as const satisfies Record<string, readonly [number, Code]>;
export type RefusalCode = keyof typeof REFUSALS;

/** What the client saw when a call was refused. */
export class Refusal extends Error {
  constructor(
    readonly transport: TransportUnderTest,
    /** REST body `code` or gRPC ErrorInfo reason. */
    readonly code: string,
    /** HTTP status (REST) or gRPC status code (gRPC). */
    readonly status: number,
    readonly requestId: string,
    readonly body: unknown,
  ) {
    super(`${transport} call refused: ${status} ${code} ${JSON.stringify(body)}`);
    this.name = 'Refusal';
  }
}

/** Asserts the call was refused with exactly this code and the status the contract gives it. */
export async function expectRefusal(call: Promise<unknown>, code: RefusalCode): Promise<Refusal> {
  let outcome: unknown;
  try {
    outcome = await call;
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    const [httpStatus, grpcCode] = REFUSALS[code];
    expect({ code: error.code, status: error.status }).toEqual({ code, status: error.transport === 'rest' ? httpStatus : grpcCode });
    return error;
  }
  throw new Error(`expected ${code}, but the call succeeded with ${JSON.stringify(outcome)}`);
}

export interface ConnectionsApi {
  readonly transport: TransportUnderTest;
  /** Request id of the last answer (REST: x-request-id header or body; gRPC: the id this client sent). */
  readonly lastRequestId: string;
  list(apiKey: string): Promise<ListConnectionsResponse>;
  start(apiKey: string, body: { toolkit: string; connectionId?: string }): Promise<StartConnectionResponse>;
  complete(apiKey: string, body: { state: string; connectedAccountId?: string }): Promise<CompleteConnectionResponse>;
  /** `confirmIdentity` undefined leaves the field out of the request. */
  confirm(apiKey: string, id: string, confirmIdentity?: boolean): Promise<ConfirmConnectionResponse>;
  /** `reason` undefined leaves the field out of the request. */
  disable(apiKey: string, id: string, reason?: string): Promise<DisableConnectionResponse>;
  release(apiKey: string, connectionId: string): Promise<ReleaseHeldPostsResponse>;
  schedule(apiKey: string, body: { connectionId: string; text: string; scheduledAt: Date }): Promise<SchedulePostResponse>;
  listPosts(apiKey: string, filter: { connectionId?: string; status?: string }): Promise<ListPostsResponse>;
}

export function connectionsApi(t: TestApp, transport: TransportUnderTest): ConnectionsApi {
  return transport === 'rest' ? new RestApi(t) : new GrpcApi(t);
}

class RestApi implements ConnectionsApi {
  readonly transport = 'rest';
  lastRequestId = '';

  constructor(private readonly t: TestApp) {}

  private async call<S extends DescMessage>(schema: S, apiKey: string, method: string, path: string, body?: unknown): Promise<MessageShape<S>> {
    const answer = await this.t.rest(method, path, { apiKey, body });
    this.lastRequestId = answer.headers.get('x-request-id') ?? '';
    if (answer.status !== 200) {
      throw new Refusal('rest', String(answer.body?.code), answer.status, String(answer.body?.requestId ?? ''), answer.body);
    }
    return fromJson(schema, answer.body);
  }

  list(apiKey: string) {
    return this.call(ListConnectionsResponseSchema, apiKey, 'GET', '/api/v1/connections');
  }
  start(apiKey: string, body: { toolkit: string; connectionId?: string }) {
    return this.call(StartConnectionResponseSchema, apiKey, 'POST', '/api/v1/connections/start', body);
  }
  complete(apiKey: string, body: { state: string; connectedAccountId?: string }) {
    return this.call(CompleteConnectionResponseSchema, apiKey, 'POST', '/api/v1/connections/complete', body);
  }
  confirm(apiKey: string, id: string, confirmIdentity?: boolean) {
    const body = confirmIdentity === undefined ? {} : { confirmIdentity };
    return this.call(ConfirmConnectionResponseSchema, apiKey, 'POST', `/api/v1/connections/${encodeURIComponent(id)}/confirm`, body);
  }
  disable(apiKey: string, id: string, reason?: string) {
    const body = reason === undefined ? {} : { reason };
    return this.call(DisableConnectionResponseSchema, apiKey, 'POST', `/api/v1/connections/${encodeURIComponent(id)}/disable`, body);
  }
  release(apiKey: string, connectionId: string) {
    return this.call(ReleaseHeldPostsResponseSchema, apiKey, 'POST', `/api/v1/connections/${encodeURIComponent(connectionId)}/release`, {});
  }
  schedule(apiKey: string, body: { connectionId: string; text: string; scheduledAt: Date }) {
    return this.call(SchedulePostResponseSchema, apiKey, 'POST', '/api/v1/posts', { ...body, scheduledAt: body.scheduledAt.toISOString() });
  }
  listPosts(apiKey: string, filter: { connectionId?: string; status?: string }) {
    const query = new URLSearchParams(Object.entries(filter).filter((entry): entry is [string, string] => entry[1] !== undefined));
    return this.call(ListPostsResponseSchema, apiKey, 'GET', `/api/v1/posts?${query}`);
  }
}

class GrpcApi implements ConnectionsApi {
  readonly transport = 'grpc';
  lastRequestId = '';

  constructor(private readonly t: TestApp) {}

  private async call<T>(fn: (options: { headers: Record<string, string> }) => Promise<T>): Promise<T> {
    this.lastRequestId = `test-${randomUUID()}`;
    try {
      return await fn({ headers: { 'x-request-id': this.lastRequestId } });
    } catch (error) {
      if (!(error instanceof ConnectError)) throw error;
      const reason = error.findDetails(ErrorInfoSchema)[0]?.reason ?? '(no ErrorInfo)';
      throw new Refusal('grpc', reason, error.code, error.metadata.get('x-request-id') ?? '', error.rawMessage);
    }
  }

  /** One HTTP/2 session per key: a fresh client per call would pay a connection setup each time. */
  private readonly clients = new Map<string, { connections: Client<typeof ConnectionService>; posts: Client<typeof PostService> }>();

  private clientsOf(apiKey: string) {
    let clients = this.clients.get(apiKey);
    if (!clients) {
      const shared = this.t.transport(apiKey);
      clients = { connections: createClient(ConnectionService, shared), posts: createClient(PostService, shared) };
      this.clients.set(apiKey, clients);
    }
    return clients;
  }

  private connections(apiKey: string) {
    return this.clientsOf(apiKey).connections;
  }

  private posts(apiKey: string) {
    return this.clientsOf(apiKey).posts;
  }

  list(apiKey: string) {
    return this.call((o) => this.connections(apiKey).listConnections({}, o));
  }
  start(apiKey: string, body: { toolkit: string; connectionId?: string }) {
    return this.call((o) => this.connections(apiKey).startConnection(body, o));
  }
  complete(apiKey: string, body: { state: string; connectedAccountId?: string }) {
    return this.call((o) => this.connections(apiKey).completeConnection(body, o));
  }
  confirm(apiKey: string, id: string, confirmIdentity?: boolean) {
    return this.call((o) => this.connections(apiKey).confirmConnection({ id, confirmIdentity }, o));
  }
  disable(apiKey: string, id: string, reason?: string) {
    return this.call((o) => this.connections(apiKey).disableConnection({ id, reason }, o));
  }
  release(apiKey: string, connectionId: string) {
    return this.call((o) => this.posts(apiKey).releaseHeldPosts({ connectionId }, o));
  }
  schedule(apiKey: string, body: { connectionId: string; text: string; scheduledAt: Date }) {
    return this.call((o) => this.posts(apiKey).schedulePost({ ...body, scheduledAt: timestampFromDate(body.scheduledAt) }, o));
  }
  listPosts(apiKey: string, filter: { connectionId?: string; status?: string }) {
    return this.call((o) => this.posts(apiKey).listPosts(filter, o));
  }
}

/** What the callback page shows after the provider sends the browser back. */
export interface CallbackPage {
  state: string;
  connectedAccountId: string;
}

/**
 * Plays the browser on the sandbox provider: opens the consent page, follows the approve
 * link of the chosen account, and follows its redirect to the service's callback page.
 */
export async function approveInSandbox(t: TestApp, redirectUrl: string, accountKey: string): Promise<CallbackPage> {
  const consent = await t.fetch(redirectUrl);
  expect(consent.status).toBe(200);
  expect(consent.headers.get('content-type')).toMatch(/^text\/html/);
  const html = await consent.text();
  const links = [...html.matchAll(/href="([^"]+)"/g)].map((m) => decodeHtml(m[1] ?? ''));
  const approveLink = links.find((href) => new URL(href, t.url).searchParams.get('account') === accountKey);
  if (!approveLink) throw new Error(`the consent page lists no account "${accountKey}": ${html}`);

  const approved = await t.fetch(approveLink, { redirect: 'manual' });
  expect(approved.status).toBe(302);
  const location = approved.headers.get('location') ?? '';
  expect(new URL(location).pathname).toBe('/connections/callback');

  const callback = await t.fetch(location);
  expect(callback.status).toBe(200);
  const page = (await callback.json()) as CallbackPage;
  expect(page).toEqual(expect.objectContaining({ state: expect.any(String), connectedAccountId: expect.any(String) }));
  return { state: page.state, connectedAccountId: page.connectedAccountId };
}

/** The sandbox escapes attribute text as numeric character references. */
function decodeHtml(text: string): string {
  return text.replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)));
}

/** Start, approve in the sandbox and complete; returns the (not yet verified) connection. */
export async function connectThroughSandbox(
  t: TestApp,
  api: ConnectionsApi,
  apiKey: string,
  toolkit: string,
  accountKey: string,
  options: { connectionId?: string } = {},
): Promise<CompleteConnectionResponse> {
  const started = await api.start(apiKey, { toolkit, ...(options.connectionId ? { connectionId: options.connectionId } : {}) });
  const callback = await approveInSandbox(t, started.redirectUrl, accountKey);
  return api.complete(apiKey, callback);
}

/** A connection that has been confirmed and may receive posts. */
export async function verifiedConnection(t: TestApp, api: ConnectionsApi, apiKey: string, toolkit: string, accountKey: string): Promise<Connection> {
  const { connection } = await connectThroughSandbox(t, api, apiKey, toolkit, accountKey);
  const confirmed = await api.confirm(apiKey, connection!.id, true);
  return confirmed.connection!;
}

/** An hour after `now`: a valid time to schedule a post. */
export function inAnHour(now: number = Date.now()): Date {
  return new Date(now + 60 * 60 * 1000);
}

/** Rows straight from the test app's database. */
export async function rows<T = Record<string, unknown>>(t: TestApp, sql: string, params: unknown[] = []): Promise<T[]> {
  return t.orm.em.fork().execute<T[]>(sql, params);
}

/**
 * Sandbox accounts are few and one account can be connected once across the whole
 * database, so each test starts without connections. Audit events stay (and cannot be
 * deleted anyway); tests read them by their own organization.
 */
export async function forgetConnections(t: TestApp): Promise<void> {
  await rows(t, 'delete from posts');
  await rows(t, 'delete from connection_attempts');
  await rows(t, 'delete from connections');
}
