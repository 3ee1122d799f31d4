import pino from 'pino';
import { Client } from 'pg';
import { authenticate, hashKey, revokeApiKey, PrincipalCache, type CustomerPrincipal } from '../../src/auth';
import { ApiKeySchema } from '../../src/db';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { within } from '../support/within';

/**
 * The API key cache: a warmed key is not looked up again, and a change to what a
 * principal is made of reaches every instance through PostgreSQL notices. "Not looked up"
 * is shown by changing a key row with triggers off (session_replication_role = replica),
 * which changes the row without a notice.
 */

const silent = pino({ level: 'silent' });

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

/** Skipping triggers takes a superuser: the service's own role cannot. */
async function withoutNotices(sql: string, params: unknown[]): Promise<void> {
  const admin = new Client({ connectionString: t.adminDatabaseUrl! });
  await admin.connect();
  try {
    await admin.query('begin');
    await admin.query('set local session_replication_role = replica');
    await admin.query(sql, params);
    await admin.query('commit');
  } finally {
    await admin.end();
  }
}

async function listenerPids(): Promise<number[]> {
  const rows = await t.orm.em
    .fork()
    .execute<{ pid: number }[]>(`select pid from pg_stat_activity where datname = current_database() and query = 'listen principal_changed'`);
  return rows.map((r) => r.pid);
}

const status = async (apiKey: string) => (await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey })).status;

describe('through the service', () => {
  it('keeps a warmed key: a revocation written without a notice is not seen, the notice empties the cache', async () => {
    const tenant = await t.tenant();
    expect(await status(tenant.apiKey)).toBe(200);
    await withoutNotices('update api_keys set revoked_at = now() where id = $1', [tenant.keyId]);
    expect(await status(tenant.apiKey)).toBe(200);

    await t.orm.em.fork().execute(`select pg_notify('principal_changed', 'test')`);
    expect(await within(2_000, async () => (await status(tenant.apiKey)) === 401)).toBe(true);
    const refused = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
  });

  it('a revocation by the admin path reaches the service without waiting for expiry', async () => {
    const tenant = await t.tenant();
    expect(await status(tenant.apiKey)).toBe(200);
    expect(await revokeApiKey(t.orm.em.fork(), tenant.keyId)).toBe(true);
    expect(await within(2_000, async () => (await status(tenant.apiKey)) === 401)).toBe(true);
  });

  it('a role changed by SQL applies to the next calls', async () => {
    const tenant = await t.tenant();
    const create = (url = 'https://hooks.example.com/role') => rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url } });
    expect((await create()).status).toBe(200);
    await t.orm.em.fork().execute(`update users set role = 'viewer' where id = ?`, [tenant.userId]);
    // Until the notice arrives the old role still creates: wait with a URL the service refuses
    // after authorization (400 as owner, 403 as viewer), so that waiting creates nothing.
    expect(await within(2_000, async () => (await create('http://hooks.example.com/role')).status === 403)).toBe(true);
    const refused = await create();
    expect(refused.body.code).toBe('PERMISSION_DENIED');
    const [row] = await t.orm.em.fork().execute<{ n: number }[]>(
      'select count(*)::int as n from webhook_endpoints where organization_id = ?',
      [tenant.organizationId],
    );
    expect(row?.n).toBe(1);
  });

  it('with its notice connection gone, every call looks its key up; when it is back, keys are kept again', async () => {
    const [pid] = await listenerPids();
    expect(pid).toBeDefined();
    const tenant = await t.tenant();
    expect(await status(tenant.apiKey)).toBe(200);

    await t.orm.em.fork().execute('select pg_terminate_backend(?)', [pid]);
    await withoutNotices('update api_keys set revoked_at = now() where id = $1', [tenant.keyId]);
    expect(await within(2_000, async () => (await status(tenant.apiKey)) === 401)).toBe(true);

    // It listens again (after a second), and a new key is kept from then on.
    expect(await within(5_000, async () => (await listenerPids()).some((p) => p !== pid))).toBe(true);
    const other = await t.tenant();
    expect(await status(other.apiKey)).toBe(200);
    await withoutNotices('update api_keys set revoked_at = now() where id = $1', [other.keyId]);
    expect(await status(other.apiKey)).toBe(200);
    await t.orm.em.fork().execute(`select pg_notify('principal_changed', 'test')`);
    expect(await within(2_000, async () => (await status(other.apiKey)) === 401)).toBe(true);
  });
});

describe('the cache itself', () => {
  let cache: PrincipalCache;
  let clock: number;
  beforeEach(async () => {
    clock = Date.now();
    cache = new PrincipalCache({ connectionString: t.databaseUrl, logger: silent, ttlMs: 1_000, maxEntries: 2, now: () => clock });
    await cache.start();
    expect(cache.live).toBe(true);
  });
  afterEach(async () => {
    await cache.close();
  });

  const principal = (n: number): CustomerPrincipal => ({
    kind: 'customer',
    organizationId: `org-${n}`,
    userId: `user-${n}`,
    role: 'owner',
    apiKeyId: `key-${n}`,
    scopes: ['webhooks:read'],
  });

  it('forgets an entry after its time to live', () => {
    cache.set('a', principal(1), clock, cache.version);
    expect(cache.get('a')?.principal.apiKeyId).toBe('key-1');
    clock += 1_000;
    expect(cache.get('a')).toBeNull();
  });

  it('holds at most maxEntries, dropping the oldest', () => {
    cache.set('a', principal(1), clock, cache.version);
    cache.set('b', principal(2), clock, cache.version);
    cache.set('c', principal(3), clock, cache.version);
    expect([cache.get('a'), cache.get('b')?.principal.apiKeyId, cache.get('c')?.principal.apiKeyId]).toEqual([null, 'key-2', 'key-3']);
  });

  it('does not keep a lookup that overlapped a notice', async () => {
    const version = cache.version;
    await t.orm.em.fork().execute(`select pg_notify('principal_changed', 'test')`);
    expect(await within(2_000, async () => cache.version !== version)).toBe(true);
    cache.set('a', principal(1), clock, version);
    expect(cache.get('a')).toBeNull();
  });

  it('keeps nothing once closed, and stored principals cannot be changed by a caller', async () => {
    cache.set('a', principal(1), clock, cache.version);
    const kept = cache.get('a')!.principal;
    expect(() => (kept.scopes as string[]).push('webhooks:write')).toThrow(TypeError);
    await cache.close();
    expect(cache.live).toBe(false);
    expect(cache.get('a')).toBeNull();
    cache.set('a', principal(1), clock, cache.version);
    expect(cache.get('a')).toBeNull();
  });

  it('a cached key still records its use at most once a minute', async () => {
    const tenant = await t.tenant();
    const em = t.orm.em.fork();
    expect((await authenticate(em, tenant.apiKey, cache)).ok).toBe(true);
    const lastUsed = async () => (await t.orm.em.fork().findOneOrFail(ApiKeySchema, { id: tenant.keyId })).lastUsedAt!.getTime();
    const first = await lastUsed();
    const entry = cache.get(hashKey(tenant.apiKey))!;
    expect(entry).not.toBeNull();

    await authenticate(em, tenant.apiKey, cache);
    expect(await lastUsed()).toBe(first);
    // A minute on, as the cache and the row would have it, without waiting for the clock.
    entry.lastUsedAt = Date.now() - 61_000;
    await withoutNotices(`update api_keys set last_used_at = last_used_at - interval '61 seconds' where id = $1`, [tenant.keyId]);
    const stale = await lastUsed();
    await authenticate(em, tenant.apiKey, cache);
    expect(await lastUsed()).toBeGreaterThan(stale);
  });
});
