import { ConnectError } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { PortalService } from '../../src/gen/publishing/internal/v1/portal_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { INTERNAL_TOKEN, PORTAL_ENV, mint, openPortal, portalAs } from './support';

let t: TestApp;
let clock = Date.now();

beforeAll(async () => {
  t = await startTestApp({ ...PORTAL_ENV, DELIVERY_POLL_INTERVAL_MS: '50' }, { listen: false, now: () => clock });
});
afterAll(async () => t?.close());

async function reasonOf(call: Promise<unknown>): Promise<string | undefined> {
  try {
    await call;
  } catch (error) {
    return ConnectError.from(error).findDetails(ErrorInfoSchema)[0]?.reason;
  }
  throw new Error('the call succeeded but a refusal was expected');
}

async function endpointOf(tenant: Tenant): Promise<string> {
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://127.0.0.1:9/hook' } });
  expect(created.status).toBe(200);
  return created.body.endpoint.id as string;
}

async function auditRows(sessionId: string): Promise<{ action: string; outcome: string; reason: string | null; actor_user_id: string | null; api_key_id: string | null }[]> {
  return t.orm.em.fork().execute('select action, outcome, reason, actor_user_id, api_key_id from audit_events where portal_session_id = ? order by id', [sessionId]);
}

describe('minting', () => {
  it('stores only the hash of the token, and the token works once', async () => {
    const tenant = await t.tenant();
    const minted = await mint(t, tenant, ['manage_endpoints']);
    expect(minted.token).toMatch(/^pps_[A-Za-z0-9_-]{43}$/);
    expect(minted.startPath).toBe(`/portal/start?token=${minted.token}`);
    expect(minted.session?.capabilities).toEqual(['read', 'manage_endpoints']);
    const stored = await t.orm.em.fork().execute<{ row: string }[]>('select row_to_json(p)::text as row from portal_sessions p where id = ?', [minted.session!.id]);
    expect(stored[0]!.row).not.toContain(minted.token);
    expect(stored[0]!.row).not.toContain(minted.token.slice(4));

    const browser = await openPortal(t, minted.startPath, minted.session!.id);
    expect(browser.cookie).toMatch(/^portal_session=[A-Za-z0-9_-]{43}$/);
    const again = await t.fetch(minted.startPath, { redirect: 'manual' });
    expect(again.status).toBe(303);
    expect(again.headers.get('location')).toBe('/portal/?refused=PORTAL_TOKEN_USED');
    expect(again.headers.get('set-cookie')).toBeNull();
  });

  it('sets the cookie HttpOnly and SameSite, for no longer than the session lasts', async () => {
    const tenant = await t.tenant();
    const minted = await mint(t, tenant, [], [], 7200);
    const start = await t.fetch(minted.startPath, { redirect: 'manual' });
    expect(start.headers.get('location')).toBe('/portal/');
    expect(start.headers.get('cache-control')).toBe('no-store');
    const cookie = start.headers.get('set-cookie') ?? '';
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/');
    const maxAge = Number(/Max-Age=(\d+)/.exec(cookie)?.[1]);
    expect(maxAge).toBeGreaterThan(7000);
    expect(maxAge).toBeLessThanOrEqual(7200);
  });

  it('refuses lifetimes outside 1 hour to 7 days, unknown capabilities and endpoints of another organization', async () => {
    const tenant = await t.tenant();
    const other = await t.tenant();
    const theirs = await endpointOf(other);
    const portal = t.client(PortalService, INTERNAL_TOKEN);
    const base = { organizationId: tenant.organizationId };
    expect(await reasonOf(portal.createPortalSession({ ...base, lifetimeSeconds: 3599 }))).toBe('PORTAL_SESSION_LIFETIME_INVALID');
    expect(await reasonOf(portal.createPortalSession({ ...base, lifetimeSeconds: 7 * 86400 + 1 }))).toBe('PORTAL_SESSION_LIFETIME_INVALID');
    expect(await reasonOf(portal.createPortalSession({ ...base, capabilities: ['admin'] }))).toBe('PORTAL_CAPABILITY_INVALID');
    expect(await reasonOf(portal.createPortalSession({ ...base, endpointIds: [theirs] }))).toBe('PORTAL_ENDPOINTS_INVALID');
    expect(await reasonOf(portal.createPortalSession({ organizationId: '00000000-0000-4000-8000-000000000000' }))).toBe('ORGANIZATION_NOT_FOUND');
  });

  it('takes the internal credential or the operator one, never a customer API key', async () => {
    const tenant = await t.tenant();
    const asCustomer = t.client(PortalService, tenant.apiKey).createPortalSession({ organizationId: tenant.organizationId });
    expect(await reasonOf(asCustomer)).toBe('INTERNAL_CREDENTIAL_REQUIRED');
    const asOperator = await t.client(PortalService, t.config.operatorToken).createPortalSession({ organizationId: tenant.organizationId });
    expect(asOperator.session?.createdBy).toBe('operator');
  });

  it('is not served under /api/v1', async () => {
    const answer = await t.rest('POST', `/api/v1/${PortalService.typeName}/CreatePortalSession`, { body: {} });
    expect(answer.status).toBe(404);
  });
});

describe('a session', () => {
  it('acts on its organization through /api/v1, audited with the session as actor', async () => {
    const tenant = await t.tenant();
    const browser = await portalAs(t, tenant, ['manage_endpoints']);
    const created = await browser.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/portal' } });
    expect(created.status).toBe(200);
    const id = created.body.endpoint.id as string;
    const paused = await browser.rest('POST', `/api/v1/webhooks/${id}/pause`, { body: {} });
    expect(paused.status).toBe(200);
    expect(paused.body.endpoint.state).toBe('paused');
    expect(await auditRows(browser.sessionId)).toEqual([{ action: 'webhook.pause', outcome: 'succeeded', reason: null, actor_user_id: null, api_key_id: null }]);
    const listed = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect(listed.body.endpoints.map((e: { id: string }) => e.id)).toEqual([id]);
  });

  it('does not show a minted secret without the secrets capability, and shows it with it', async () => {
    const tenant = await t.tenant();
    const without = await portalAs(t, tenant, ['manage_endpoints']);
    const hidden = await without.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/a' } });
    expect(hidden.status).toBe(200);
    expect(hidden.body.signingSecret ?? '').toBe('');
    const rotate = await without.rest('POST', `/api/v1/webhooks/${hidden.body.endpoint.id}/rotate-secret`, { body: {} });
    expect([rotate.status, rotate.body.code]).toEqual([403, 'PERMISSION_DENIED']);
    const withSecrets = await portalAs(t, tenant, ['manage_endpoints', 'secrets']);
    const shown = await withSecrets.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/b' } });
    expect(shown.body.signingSecret).toMatch(/^whsec_/);
  });

  it('refuses a read-only session that writes, with the code and audit event an API key gets', async () => {
    const tenant = await t.tenant();
    const id = await endpointOf(tenant);
    const browser = await portalAs(t, tenant);
    expect((await browser.rest('GET', '/api/v1/webhooks')).status).toBe(200);
    for (const [method, path] of [
      ['POST', '/api/v1/webhooks'],
      ['POST', `/api/v1/webhooks/${id}/pause`],
      ['POST', `/api/v1/webhooks/${id}/test`],
      ['DELETE', `/api/v1/webhooks/${id}`],
      ['POST', `/api/v1/webhooks/${id}/recover`],
    ] as const) {
      const body = path === '/api/v1/webhooks' ? { url: 'https://127.0.0.1:9/x' } : method === 'POST' ? {} : undefined;
      const answer = await browser.rest(method, path, { body });
      expect([path, answer.status, answer.body.code]).toEqual([path, 403, 'PERMISSION_DENIED']);
    }
    const [stored] = await t.orm.em.fork().execute<{ paused_at: Date | null; disabled_at: Date | null }[]>('select paused_at, disabled_at from webhook_endpoints where id = ?', [id]);
    expect(stored).toEqual({ paused_at: null, disabled_at: null });
    expect(await auditRows(browser.sessionId)).toEqual([
      { action: 'webhook.pause', outcome: 'refused', reason: 'PERMISSION_DENIED', actor_user_id: null, api_key_id: null },
      { action: 'webhook.recover', outcome: 'refused', reason: 'PERMISSION_DENIED', actor_user_id: null, api_key_id: null },
    ]);
  });

  it("answers another organization's ids as not found, on every lookup", async () => {
    const tenant = await t.tenant();
    const other = await t.tenant();
    const theirs = await endpointOf(other);
    const browser = await portalAs(t, tenant, ['manage_endpoints', 'resend', 'secrets']);
    for (const [method, path] of [
      ['GET', `/api/v1/webhooks/${theirs}/deliveries`],
      ['GET', `/api/v1/webhooks/${theirs}/statistics`],
      ['POST', `/api/v1/webhooks/${theirs}/pause`],
      ['POST', `/api/v1/webhooks/${theirs}/rotate-secret`],
      ['DELETE', `/api/v1/webhooks/${theirs}`],
    ] as const) {
      const answer = await browser.rest(method, path, { body: method === 'POST' ? {} : undefined });
      expect([path, answer.status, answer.body.code]).toEqual([path, 404, 'WEBHOOK_NOT_FOUND']);
    }
    expect((await browser.rest('GET', '/api/v1/webhooks')).body.endpoints ?? []).toEqual([]);
  });

  it('narrowed to endpoints, sees and acts on those alone and creates none', async () => {
    const tenant = await t.tenant();
    const mine = await endpointOf(tenant);
    const sibling = await endpointOf(tenant);
    const browser = await portalAs(t, tenant, ['manage_endpoints'], [mine]);
    const listed = await browser.rest('GET', '/api/v1/webhooks');
    expect(listed.body.endpoints.map((e: { id: string }) => e.id)).toEqual([mine]);
    expect((await browser.rest('POST', `/api/v1/webhooks/${mine}/pause`, { body: {} })).status).toBe(200);
    const refused = await browser.rest('POST', `/api/v1/webhooks/${sibling}/pause`, { body: {} });
    expect([refused.status, refused.body.code]).toEqual([404, 'WEBHOOK_NOT_FOUND']);
    const create = await browser.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/new' } });
    expect([create.status, create.body.code]).toEqual([403, 'PERMISSION_DENIED']);
  });

  it('refuses a cookie call without its CSRF token, or with another session’s', async () => {
    const tenant = await t.tenant();
    const browser = await portalAs(t, tenant, ['manage_endpoints']);
    const other = await portalAs(t, tenant, ['manage_endpoints']);
    const missing = await browser.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/csrf' }, csrf: null });
    expect([missing.status, missing.body.code]).toEqual([403, 'CSRF_TOKEN_INVALID']);
    const foreign = await browser.rest('POST', '/api/v1/webhooks', { body: { url: 'https://127.0.0.1:9/csrf' }, csrf: other.csrfToken });
    expect([foreign.status, foreign.body.code]).toEqual([403, 'CSRF_TOKEN_INVALID']);
    const rows = await t.orm.em.fork().execute('select id from webhook_endpoints where organization_id = ?', [tenant.organizationId]);
    expect(rows).toEqual([]);
  });

  it('is refused at once once revoked, alone or with every session of its organization', async () => {
    const tenant = await t.tenant();
    const one = await portalAs(t, tenant);
    const two = await portalAs(t, tenant);
    const three = await portalAs(t, tenant);
    const portal = t.client(PortalService, INTERNAL_TOKEN);
    expect((await one.rest('GET', '/api/v1/webhooks')).status).toBe(200);
    const revoked = await portal.revokePortalSession({ organizationId: tenant.organizationId, sessionId: one.sessionId });
    expect(revoked.session?.revokedAt).toBeDefined();
    const refused = await one.rest('GET', '/api/v1/webhooks');
    expect([refused.status, refused.body.code]).toEqual([401, 'PORTAL_SESSION_REVOKED']);
    expect((await two.rest('GET', '/api/v1/webhooks')).status).toBe(200);
    expect((await portal.revokePortalSessions({ organizationId: tenant.organizationId })).revoked).toBe(2);
    for (const browser of [two, three]) expect((await browser.rest('GET', '/api/v1/webhooks')).body.code).toBe('PORTAL_SESSION_REVOKED');
    const other = await t.tenant();
    expect(await reasonOf(portal.revokePortalSession({ organizationId: other.organizationId, sessionId: two.sessionId }))).toBe('PORTAL_SESSION_NOT_FOUND');
  });

  it('is refused at once once expired, and its unused link with it', async () => {
    const tenant = await t.tenant();
    const browser = await portalAs(t, tenant);
    const unused = await mint(t, tenant);
    expect((await browser.rest('GET', '/api/v1/webhooks')).status).toBe(200);
    clock += 3600 * 1000;
    try {
      const refused = await browser.rest('GET', '/api/v1/webhooks');
      expect([refused.status, refused.body.code]).toEqual([401, 'PORTAL_SESSION_EXPIRED']);
      const start = await t.fetch(unused.startPath, { redirect: 'manual' });
      expect(start.headers.get('location')).toBe('/portal/?refused=PORTAL_SESSION_EXPIRED');
    } finally {
      clock -= 3600 * 1000;
    }
  });

  it('opens no other service: connections and posts refuse it', async () => {
    const tenant = await t.tenant();
    const browser = await portalAs(t, tenant, ['manage_endpoints', 'secrets', 'resend']);
    const connections = await browser.rest('GET', '/api/v1/connections');
    expect([connections.status, connections.body.code]).toEqual([403, 'PERMISSION_DENIED']);
  });
});
