/**
 * Tenant isolation as a matrix: every route that takes an identifier, on REST and RPC,
 * called by one organization with every identifier of another (connections in each
 * state, webhook endpoints, posts, deliveries, attempts, even the organization, user
 * and key ids), in the exact and upper-case spellings. Each answer is the route's
 * "not found" (or, for a foreign state, the organization mismatch), and the other
 * organization's rows are byte-for-byte the same afterwards. List routes never show
 * the other organization's ids, even with page tokens aimed at its rows.
 *
 * Both run in process, through the app's handler and its router with the same gate and
 * interceptors: what is proven is who may see what, which no transport changes (the
 * transports have suites of their own, and the hostile suites go over real sockets).
 */
import { randomUUID } from 'node:crypto';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { PostService } from '../../src/gen/publishing/v1/post_service_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { approveSandboxAccount, connectSandboxAccount } from '../support/connections';
import { auditEventsSince, auditHighWater, snapshotDomain, snapshotOrganization } from './support';

let t: TestApp;
let a: Tenant;
let b: Tenant;
/** Every id that belongs to organization B, by what it names. */
const foreign: Record<string, string> = {};
/** States of B's open connection attempts. */
const foreignStates: string[] = [];
/** Ids of A's own rows, to prove the lists are not empty by accident. */
const own: Record<string, string> = {};

const inAnHour = () => new Date(Date.now() + 60 * 60 * 1000);

async function ok<T>(response: Promise<{ status: number; body: T }>): Promise<T> {
  const r = await response;
  if (r.status !== 200) throw new Error(`setup call failed: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

beforeAll(async () => {
  t = await startTestApp({}, { listen: false });
  a = await t.tenant({ role: 'owner' });
  b = await t.tenant({ role: 'owner' });
  const asB = (method: string, path: string, body?: unknown) => ok<any>(t.rest(method, path, { apiKey: b.apiKey, body }));

  // B: a verified connection with scheduled posts, a disabled one with held posts, an unverified one,
  // and one held after a reconnect returned another account.
  const verified = await connectSandboxAccount(t, b.apiKey, 'instagram', 'bakery');
  await asB('POST', `/api/v1/connections/${verified.id}/confirm`, { confirmIdentity: true });
  foreign.verifiedConnection = verified.id;
  foreign.scheduledPost = (await asB('POST', '/api/v1/posts', { connectionId: verified.id, text: 'B post', scheduledAt: inAnHour().toISOString() })).post.id;

  const disabled = await connectSandboxAccount(t, b.apiKey, 'facebook', 'page');
  await asB('POST', `/api/v1/connections/${disabled.id}/confirm`, { confirmIdentity: true });
  foreign.heldPost = (await asB('POST', '/api/v1/posts', { connectionId: disabled.id, text: 'B held', scheduledAt: inAnHour().toISOString() })).post.id;
  await asB('POST', `/api/v1/connections/${disabled.id}/disable`, { reason: 'isolation fixture' });
  foreign.disabledConnection = disabled.id;

  foreign.unverifiedConnection = (await connectSandboxAccount(t, b.apiKey, 'linkedin', 'member')).id;

  const reconnected = await connectSandboxAccount(t, b.apiKey, 'youtube', 'channel');
  await asB('POST', `/api/v1/connections/${reconnected.id}/confirm`, { confirmIdentity: true });
  const restart = await asB('POST', '/api/v1/connections/start', { toolkit: 'youtube', connectionId: reconnected.id });
  const channel2 = await approveSandboxAccount(t, restart.redirectUrl, 'channel2');
  await asB('POST', '/api/v1/connections/complete', { state: restart.state, connectedAccountId: channel2 });
  foreign.heldConnection = reconnected.id;

  // B: open attempts (a new connection and a reconnect), whose states A must not complete.
  const open = await asB('POST', '/api/v1/connections/start', { toolkit: 'instagram' });
  const reconnect = await asB('POST', '/api/v1/connections/start', { toolkit: 'instagram', connectionId: verified.id });
  foreignStates.push(open.state, reconnect.state);
  foreign.openAttempt = JSON.parse(Buffer.from(open.state.split('.')[1], 'base64url').toString('utf8')).attemptId;

  // B: an active and a disabled webhook endpoint, with a delivered and a dead-lettered delivery.
  foreign.activeEndpoint = (await asB('POST', '/api/v1/webhooks', { url: 'https://hooks.example.com/b', eventNames: ['webhook.test'] })).endpoint.id;
  foreign.disabledEndpoint = (await asB('POST', '/api/v1/webhooks', { url: 'https://hooks.example.com/b2' })).endpoint.id;
  await asB('DELETE', `/api/v1/webhooks/${foreign.disabledEndpoint}`);
  const em = t.orm.em.fork();
  for (const [key, status] of [['deliveredDelivery', 'delivered'], ['deadLetteredDelivery', 'dead_lettered']] as const) {
    const id = randomUUID();
    const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
    await em.execute(
      `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, delivered_at, created_at, updated_at)
       values (?, ?, ?, ?, 'webhook.test', '{}', ?, 1, ?, ?, now(), now())`,
      [id, b.organizationId, foreign.activeEndpoint, eventId, status, `webhook-delivery/${b.organizationId}/${foreign.activeEndpoint}/${eventId}`, status === 'delivered' ? new Date() : null],
    );
    await em.execute('insert into delivery_attempts (delivery_id, attempt, started_at, finished_at, response_status) values (?, 1, now(), now(), ?)', [id, status === 'delivered' ? 200 : 500]);
    if (status === 'dead_lettered') {
      await em.execute("insert into dead_letters (delivery_id, organization_id, endpoint_id, last_error, created_at) values (?, ?, ?, 'HTTP 500', now())", [id, b.organizationId, foreign.activeEndpoint]);
    }
    foreign[key] = id;
  }
  foreign.organization = b.organizationId;
  foreign.user = b.userId;
  foreign.apiKey = b.keyId;

  // A: rows of its own, so that its lists have something to show.
  const mine = await connectSandboxAccount(t, a.apiKey, 'instagram', 'creator');
  await ok(t.rest('POST', `/api/v1/connections/${mine.id}/confirm`, { apiKey: a.apiKey, body: { confirmIdentity: true } }));
  own.connection = mine.id;
  own.post = (await ok<any>(t.rest('POST', '/api/v1/posts', { apiKey: a.apiKey, body: { connectionId: mine.id, text: 'A post', scheduledAt: inAnHour().toISOString() } }))).post.id;
  own.endpoint = (await ok<any>(t.rest('POST', '/api/v1/webhooks', { apiKey: a.apiKey, body: { url: 'https://hooks.example.com/a' } }))).endpoint.id;
});
afterAll(async () => {
  await t?.close();
});

// ---------------------------------------------------------------------------------------

type Answer = { ok: true; body: unknown } | { ok: false; code: string; status: number };

interface IdRoute {
  name: string;
  /** The refusal the route gives for an id that is not the caller's, with its HTTP status and RPC (gRPC) code. */
  refusal: { code: string; http: number; grpc: Code } | 'empty-list';
  rest(id: string, variant: 'plain' | 'trailing-slash'): Promise<Answer>;
  grpc(id: string): Promise<Answer>;
}

const CONNECTION_NOT_FOUND = { code: 'CONNECTION_NOT_FOUND', http: 404, grpc: Code.NotFound };
const WEBHOOK_NOT_FOUND = { code: 'WEBHOOK_NOT_FOUND', http: 404, grpc: Code.NotFound };

async function viaRest(method: string, path: string, body?: unknown): Promise<Answer> {
  const r = await t.rest(method, path, { apiKey: a.apiKey, body });
  return r.status === 200 ? { ok: true, body: r.body } : { ok: false, code: String(r.body?.code), status: r.status };
}

async function viaGrpc(call: () => Promise<unknown>): Promise<Answer> {
  try {
    return { ok: true, body: await call() };
  } catch (error) {
    const e = ConnectError.from(error);
    return { ok: false, code: e.findDetails(ErrorInfoSchema)[0]?.reason ?? `(no ErrorInfo: ${e.rawMessage})`, status: e.code };
  }
}

const grpcClients = () => {
  const shared = t.transport(a.apiKey);
  return { connections: createClient(ConnectionService, shared), posts: createClient(PostService, shared), webhooks: createClient(WebhookService, shared) };
};

function idRoutes(): IdRoute[] {
  const g = grpcClients();
  const slash = (variant: 'plain' | 'trailing-slash') => (variant === 'trailing-slash' ? '/' : '');
  return [
    {
      name: 'ConfirmConnection',
      refusal: CONNECTION_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/connections/${encodeURIComponent(id)}/confirm${slash(v)}`, { confirmIdentity: true }),
      grpc: (id) => viaGrpc(() => g.connections.confirmConnection({ id, confirmIdentity: true })),
    },
    {
      name: 'DisableConnection',
      refusal: CONNECTION_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/connections/${encodeURIComponent(id)}/disable${slash(v)}`, { reason: 'not yours' }),
      grpc: (id) => viaGrpc(() => g.connections.disableConnection({ id, reason: 'not yours' })),
    },
    {
      name: 'ReleaseHeldPosts',
      refusal: CONNECTION_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/connections/${encodeURIComponent(id)}/release${slash(v)}`, {}),
      grpc: (id) => viaGrpc(() => g.posts.releaseHeldPosts({ connectionId: id })),
    },
    {
      name: 'StartConnection (reconnect)',
      refusal: CONNECTION_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/connections/start${slash(v)}`, { toolkit: 'instagram', connectionId: id }),
      grpc: (id) => viaGrpc(() => g.connections.startConnection({ toolkit: 'instagram', connectionId: id })),
    },
    {
      name: 'SchedulePost',
      refusal: CONNECTION_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/posts${slash(v)}`, { connectionId: id, text: 'into B', scheduledAt: inAnHour().toISOString() }),
      grpc: (id) => viaGrpc(() => g.posts.schedulePost({ connectionId: id, text: 'into B', scheduledAt: timestampFromDate(inAnHour()) })),
    },
    {
      name: 'ListPosts (connectionId filter)',
      refusal: 'empty-list',
      rest: (id, v) => viaRest('GET', `/api/v1/posts${slash(v)}?connectionId=${encodeURIComponent(id)}`),
      grpc: (id) => viaGrpc(() => g.posts.listPosts({ connectionId: id })),
    },
    {
      name: 'TestWebhook',
      refusal: WEBHOOK_NOT_FOUND,
      rest: (id, v) => viaRest('POST', `/api/v1/webhooks/${encodeURIComponent(id)}/test${slash(v)}`, {}),
      grpc: (id) => viaGrpc(() => g.webhooks.testWebhook({ id })),
    },
    {
      name: 'DeleteWebhook',
      refusal: WEBHOOK_NOT_FOUND,
      rest: (id, v) => viaRest('DELETE', `/api/v1/webhooks/${encodeURIComponent(id)}${slash(v)}`),
      grpc: (id) => viaGrpc(() => g.webhooks.deleteWebhook({ id })),
    },
  ];
}

/** Every id of B that appears anywhere in the value. */
function foreignIdsIn(value: unknown): string[] {
  const text = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)).toLowerCase();
  return Object.entries(foreign)
    .filter(([, id]) => text.includes(id.toLowerCase()))
    .map(([name]) => name);
}

it("refuses every route called with another organization's ids, over REST and RPC, and leaves its rows untouched", async () => {
  const beforeB = await snapshotOrganization(t, b.organizationId);
  const beforeAll = await snapshotDomain(t);
  const auditMark = await auditHighWater(t);
  const failures: string[] = [];
  let cells = 0;

  const check = (label: string, route: IdRoute, answer: Answer, transportName: 'rest' | 'grpc') => {
    cells++;
    if (route.refusal === 'empty-list') {
      if (!answer.ok) failures.push(`${label}: refused ${answer.code} (${answer.status}), expected an empty list`);
      else if (((answer.body as { posts?: unknown[] }).posts ?? []).length !== 0) failures.push(`${label}: listed posts ${JSON.stringify(answer.body).slice(0, 200)}`);
      else if (foreignIdsIn(answer.body).length > 0) failures.push(`${label}: shows ${foreignIdsIn(answer.body).join(', ')}`);
      return;
    }
    const expected = { code: route.refusal.code, status: transportName === 'rest' ? route.refusal.http : route.refusal.grpc };
    if (answer.ok) failures.push(`${label}: succeeded with ${JSON.stringify(answer.body).slice(0, 200)}`);
    else if (answer.code !== expected.code || answer.status !== expected.status) failures.push(`${label}: ${answer.code} (${answer.status}), expected ${expected.code} (${expected.status})`);
  };

  for (const route of idRoutes()) {
    for (const [name, id] of Object.entries(foreign)) {
      for (const spelling of [id, id.toUpperCase()]) {
        const shown = `${route.name} with B's ${name}${spelling === id ? '' : ' (upper case)'}`;
        check(`REST ${shown}`, route, await route.rest(spelling, 'plain'), 'rest');
        check(`RPC ${shown}`, route, await route.grpc(spelling), 'grpc');
      }
      // A trailing slash is not the route's spelling: refused before anything is looked up.
      const slashed = await route.rest(id, 'trailing-slash');
      cells++;
      if (slashed.ok || slashed.code !== 'ROUTE_NOT_FOUND' || slashed.status !== 404) {
        failures.push(`REST ${route.name} with B's ${name} and a trailing slash: ${slashed.ok ? 'succeeded' : `${slashed.code} (${slashed.status})`}, expected ROUTE_NOT_FOUND (404)`);
      }
    }
  }

  // B's connection states, completed by A (the owner of A, who may complete A's own attempts).
  const g = grpcClients();
  for (const state of foreignStates) {
    for (const transportName of ['rest', 'grpc'] as const) {
      cells++;
      const answer =
        transportName === 'rest'
          ? await viaRest('POST', '/api/v1/connections/complete', { state, connectedAccountId: 'sbx.instagram.creator' })
          : await viaGrpc(() => g.connections.completeConnection({ state, connectedAccountId: 'sbx.instagram.creator' }));
      const expected = { code: 'STATE_ORGANIZATION_MISMATCH', status: transportName === 'rest' ? 403 : Code.PermissionDenied };
      if (answer.ok || answer.code !== expected.code || answer.status !== expected.status) {
        failures.push(`${transportName === 'rest' ? 'REST' : 'RPC'} CompleteConnection with B's state: ${JSON.stringify(answer).slice(0, 200)}`);
      }
    }
  }

  const afterB = await snapshotOrganization(t, b.organizationId);
  const afterAll = await snapshotDomain(t);
  const audit = await auditEventsSince(t, auditMark);
  console.log(`isolation matrix: ${cells} cells (${Object.keys(foreign).length} foreign ids × ${idRoutes().length} routes × REST/RPC and spellings, plus ${foreignStates.length} foreign states × 2 transports); failures: ${failures.length}\n  ${failures.slice(0, 20).join('\n  ')}`);
  expect(failures).toEqual([]);
  expect(afterB).toEqual(beforeB);
  expect(afterAll).toEqual(beforeAll);
  // A's refusals are A's to audit: nothing was recorded against B.
  expect(audit.filter((e) => e.organization_id === b.organizationId)).toEqual([]);
  expect(audit.filter((e) => e.outcome !== 'refused')).toEqual([]);
}, 120_000);

it("never lists another organization's ids, even with page tokens aimed at its rows", async () => {
  const g = grpcClients();
  const cursor = (at: string, id: string) => Buffer.from(JSON.stringify({ at, id })).toString('base64url');
  const rowsOfB = await t.orm.em
    .fork()
    .execute<{ id: string; at: string | Date }[]>(
      `select id::text, created_at as at from connections where organization_id = ? union all select id::text, created_at from webhook_endpoints where organization_id = ?
       union all select id::text, scheduled_at from posts where organization_id = ?`,
      [b.organizationId, b.organizationId, b.organizationId],
    );
  // Page tokens just before, at and just after each of B's rows (posts page newest first), and none at all.
  const tokens = [''];
  for (const row of rowsOfB) {
    const at = new Date(row.at).getTime();
    tokens.push(cursor(new Date(at - 1).toISOString(), '00000000-0000-0000-0000-000000000000'), cursor(new Date(at).toISOString(), row.id), cursor(new Date(at + 1).toISOString(), row.id));
  }
  let lists = 0;
  const leaks: string[] = [];
  const seenOwn = new Set<string>();
  for (const pageToken of tokens) {
    const query = pageToken ? `?pageToken=${pageToken}` : '';
    const answers: [string, Answer][] = [
      ['REST ListConnections', await viaRest('GET', `/api/v1/connections${query}`)],
      ['REST ListWebhooks', await viaRest('GET', `/api/v1/webhooks${query}`)],
      ['REST ListPosts', await viaRest('GET', `/api/v1/posts${query}`)],
      ['RPC ListConnections', await viaGrpc(() => g.connections.listConnections({ pageToken }))],
      ['RPC ListWebhooks', await viaGrpc(() => g.webhooks.listWebhooks({ pageToken }))],
      ['RPC ListPosts', await viaGrpc(() => g.posts.listPosts({ pageToken }))],
    ];
    for (const [name, answer] of answers) {
      lists++;
      if (!answer.ok) {
        leaks.push(`${name} with token ${pageToken || '(none)'} refused: ${answer.code} ${answer.status}`);
        continue;
      }
      const shown = foreignIdsIn(answer.body);
      if (shown.length > 0) leaks.push(`${name} with token ${pageToken || '(none)'} shows B's ${shown.join(', ')}`);
      const text = JSON.stringify(answer.body, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
      for (const [key, id] of Object.entries(own)) if (text.includes(id)) seenOwn.add(key);
    }
  }
  console.log(`isolation lists: ${lists} list answers checked (${tokens.length} page tokens × 3 lists × REST/RPC); leaks: ${leaks.length}`);
  expect(leaks).toEqual([]);
  // The lists do show A's own rows: an empty answer everywhere would prove nothing.
  expect([...seenOwn].sort()).toEqual(Object.keys(own).sort());
});
