import { Client } from 'pg';
import { verifyWebhook } from '../../src/signatures';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { rest } from '../support/clients';
import { connectSandboxAccount } from '../support/connections';
import { makeTestTls } from '../support/tls';
import { within } from '../support/within';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

/**
 * The platform's own events (README, "Events") end to end: a change made through the
 * public API arrives, signed, at a subscribed endpoint; a change that rolls back sends nothing.
 */
const CATALOG = ['connection.verified', 'connection.held', 'connection.disconnected', 'post.held', 'post.released'];

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20' });
  receiver = await startHttpsReceiver({ tls });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

async function subscribe(tenant: Tenant, path: string): Promise<string> {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}${path}`, eventNames: CATALOG } });
  expect(created.status).toBe(200);
  return created.body.signingSecret as string;
}

/** The signed bodies the receiver got on this path, verified with the endpoint's secret. */
function received(path: string, secret: string): { id: string; type: string; createdAt: string; data: Record<string, unknown> }[] {
  return receiver.requests
    .filter((r) => r.path === path)
    .map((r) => {
      verifyWebhook(secret, r.headers, r.rawBody);
      return JSON.parse(r.rawBody);
    });
}

/** Waits for `n` arrivals on the path (the deliveries are asynchronous); fails the test after 10 s. */
async function arrivals(path: string, n: number): Promise<void> {
  expect(await within(10_000, async () => receiver.requests.filter((r) => r.path === path).length >= n)).toBe(true);
}

async function schedulePost(tenant: Tenant, connectionId: string): Promise<string> {
  const scheduled = await rest(t.url, 'POST', '/api/v1/posts', {
    apiKey: tenant.apiKey,
    body: { connectionId, text: 'Fresh bread at seven', scheduledAt: new Date(Date.now() + 86_400_000).toISOString() },
  });
  expect(scheduled.status).toBe(200);
  return scheduled.body.post.id as string;
}

it('confirming, then disabling a connection through the API delivers connection.verified, connection.disconnected and post.held, signed', async () => {
  const tenant = await t.tenant();
  const secret = await subscribe(tenant, '/lifecycle');
  const connection = await connectSandboxAccount(t.url, tenant.apiKey, 'instagram', 'bakery');
  const confirmed = await rest(t.url, 'POST', `/api/v1/connections/${connection.id}/confirm`, { apiKey: tenant.apiKey, body: { confirmIdentity: true } });
  expect(confirmed.status).toBe(200);
  await arrivals('/lifecycle', 1);
  const posts = [await schedulePost(tenant, connection.id), await schedulePost(tenant, connection.id)];

  const disabled = await rest(t.url, 'POST', `/api/v1/connections/${connection.id}/disable`, { apiKey: tenant.apiKey, body: { reason: 'account under review' } });
  expect(disabled.status).toBe(200);
  await arrivals('/lifecycle', 4);
  await t.app.delivery.embedded!.idle();

  const bodies = received('/lifecycle', secret);
  expect(bodies.map((b) => b.type).sort()).toEqual(['connection.disconnected', 'connection.verified', 'post.held', 'post.held']);
  expect(bodies.find((b) => b.type === 'connection.verified')!.data).toMatchObject({ connectionId: connection.id, toolkit: 'instagram', accountId: connection.identity!.accountId });
  expect(bodies.find((b) => b.type === 'connection.disconnected')!.data).toMatchObject({
    connectionId: connection.id,
    toolkit: 'instagram',
    reason: 'account under review',
    heldPosts: 2,
  });
  const held = bodies.filter((b) => b.type === 'post.held').map((b) => b.data);
  expect(held.map((d) => d.postId).sort()).toEqual([...posts].sort());
  for (const d of held) expect(d).toMatchObject({ connectionId: connection.id, holdReason: 'connection_disabled' });
  // One event per change: each id once, each delivered once.
  expect(new Set(bodies.map((b) => b.id)).size).toBe(bodies.length);
  const events = await t.orm.em.fork().execute<{ n: number }[]>("select count(*)::int as n from events where organization_id = ? and publisher = 'platform'", [tenant.organizationId]);
  expect(events[0]!.n).toBe(4);
});

it('a disable that fails and rolls back records and delivers none of its events', async () => {
  const tenant = await t.tenant();
  const secret = await subscribe(tenant, '/rolled-back');
  const connection = await connectSandboxAccount(t.url, tenant.apiKey, 'facebook', 'page');
  expect((await rest(t.url, 'POST', `/api/v1/connections/${connection.id}/confirm`, { apiKey: tenant.apiKey, body: { confirmIdentity: true } })).status).toBe(200);
  await arrivals('/rolled-back', 1);
  await schedulePost(tenant, connection.id);
  const em = t.orm.em.fork();
  // The connection's own update is the last write of the disable's transaction: failing it fails the whole change.
  // Only the schema's owner may add a trigger; the service role cannot.
  const owner = new Client({ connectionString: t.ownerDatabaseUrl! });
  await owner.connect();
  try {
    await owner.query(`create function refuse_disconnect() returns trigger language plpgsql as $$
      begin if new.status = 'disconnected' and new.id = '${connection.id}' then raise exception 'disconnect refused for this test'; end if; return new; end $$`);
    await owner.query('create trigger refuse_disconnect before update on connections for each row execute function refuse_disconnect()');
    const disabled = await rest(t.url, 'POST', `/api/v1/connections/${connection.id}/disable`, { apiKey: tenant.apiKey, body: { reason: 'will not stick' } });
    expect(disabled.status).toBe(500);
  } finally {
    await owner.query('drop trigger if exists refuse_disconnect on connections');
    await owner.query('drop function if exists refuse_disconnect()');
    await owner.end();
  }
  // Only the confirmation before it was recorded and sent.
  const rows = await em.execute<{ event_type: string }[]>('select event_type from events where organization_id = ?', [tenant.organizationId]);
  expect(rows.map((r) => r.event_type)).toEqual(['connection.verified']);
  const deliveries = await em.execute<{ event_type: string }[]>('select event_type from webhook_deliveries where organization_id = ?', [tenant.organizationId]);
  expect(deliveries.map((d) => d.event_type)).toEqual(['connection.verified']);
  await t.app.delivery.embedded!.idle();
  expect(received('/rolled-back', secret).map((b) => b.type)).toEqual(['connection.verified']);
  const [state] = await em.execute<{ status: string }[]>('select status from connections where id = ?', [connection.id]);
  expect(state!.status).toBe('verified');
  const [post] = await em.execute<{ status: string }[]>('select status from posts where connection_id = ?', [connection.id]);
  expect(post!.status).toBe('scheduled');
});
