import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { Code, ConnectError } from '@connectrpc/connect';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { ApiKeySchema, OrganizationSchema, UserSchema } from '../../src/db';
import { hashKey, PERMISSIONS } from '../../src/auth';
import { main } from '../../src/admin/cli';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { within } from '../support/within';

const ROOT = path.resolve(__dirname, '../..');

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** The admin CLI's main, in this process, against the test app's database. */
async function admin(...args: string[]): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const status = await main(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, DATABASE_URL: t.databaseUrl, NODE_ENV: 'test' },
  });
  return { status, stdout, stderr };
}

async function adminJson<T = Record<string, any>>(...args: string[]): Promise<T> {
  const run = await admin(...args, '--json');
  expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
  return JSON.parse(run.stdout) as T;
}

async function rowCounts(): Promise<Record<string, number>> {
  const [row] = await t.orm.em.fork().execute<{ organizations: string; users: string; api_keys: string }[]>(
    `select (select count(*) from organizations) as organizations,
            (select count(*) from users) as users,
            (select count(*) from api_keys) as api_keys`,
  );
  return { organizations: Number(row!.organizations), users: Number(row!.users), api_keys: Number(row!.api_keys) };
}

describe('admin CLI', () => {
  it('creates an organization, a user and a key whose printed secret authenticates', async () => {
    const org = await adminJson('create-org', '--name', 'Acme Bakery', '--plan', 'agency');
    expect(org).toEqual({ organizationId: expect.any(String), name: 'Acme Bakery', plan: 'agency' });

    const user = await adminJson('create-user', '--org', org.organizationId, '--email', 'Baker@Example.com', '--role', 'member');
    expect(user).toEqual({ userId: expect.any(String), organizationId: org.organizationId, email: 'baker@example.com', role: 'member' });

    const key = await adminJson('create-key', '--org', org.organizationId, '--user', user.userId, '--scopes', 'connections:read, connections:manage', '--name', 'ci');
    expect(key).toEqual({ keyId: expect.any(String), apiKey: expect.stringMatching(/^pk_live_[A-Za-z0-9_-]{43}$/), scopes: ['connections:read', 'connections:manage'] });

    const em = t.orm.em.fork();
    expect(await em.findOneOrFail(OrganizationSchema, { id: org.organizationId })).toMatchObject({ name: 'Acme Bakery', plan: 'agency' });
    expect(await em.findOneOrFail(UserSchema, { id: user.userId })).toMatchObject({ organizationId: org.organizationId, role: 'member' });
    const stored = await em.findOneOrFail(ApiKeySchema, { id: key.keyId });
    expect(stored).toMatchObject({ organizationId: org.organizationId, userId: user.userId, name: 'ci', keyHash: hashKey(key.apiKey), revokedAt: null });
    expect(JSON.stringify(stored)).not.toContain(key.apiKey);

    const list = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: key.apiKey });
    expect(list.status).toBe(200);
    expect(list.body.connections ?? []).toEqual([]);
    const viaGrpc = await client(ConnectionService, t.url, 'grpc', key.apiKey).listConnections({});
    expect(viaGrpc.connections).toEqual([]);
    // The key carries exactly the scopes asked for.
    const webhooks = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: key.apiKey });
    expect(webhooks).toMatchObject({ status: 403, body: { code: 'SCOPE_MISSING', details: { scope: 'webhooks:write' } } });
  });

  it('revokes a key, which then gets 401 API_KEY_REVOKED', async () => {
    const tenant = await t.tenant();
    expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);

    expect(await adminJson('revoke-key', '--key', tenant.keyId)).toEqual({ keyId: tenant.keyId, revoked: true });

    // The app caches keys; the revocation reaches it as a PostgreSQL notice, milliseconds after the commit.
    let refused: Awaited<ReturnType<typeof rest>> | undefined;
    await within(2_000, async () => (refused = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status === 401);
    expect({ status: refused?.status, code: refused?.body.code }).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    const viaGrpc = await client(ConnectionService, t.url, 'grpc', tenant.apiKey).listConnections({}).catch((error: unknown) => ConnectError.from(error));
    expect(viaGrpc).toBeInstanceOf(ConnectError);
    expect((viaGrpc as ConnectError).code).toBe(Code.Unauthenticated);

    const again = await admin('revoke-key', '--key', tenant.keyId);
    expect(again.status).toBe(2);
    expect(again.stderr).toContain('already revoked');
  });

  it('bootstraps the development organization with an owner key that has every scope, and a new key for it at every call', async () => {
    const boot = await adminJson('bootstrap');
    expect(boot).toEqual({
      organizationId: expect.any(String),
      userId: expect.any(String),
      keyId: expect.any(String),
      apiKey: expect.stringMatching(/^pk_live_/),
      scopes: [...PERMISSIONS],
    });
    const owner = await t.orm.em.fork().findOneOrFail(UserSchema, { id: boot.userId });
    expect(owner).toMatchObject({ organizationId: boot.organizationId, role: 'owner' });

    const start = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: boot.apiKey, body: { toolkit: 'instagram' } });
    expect(start.status).toBe(200);
    expect(start.body.redirectUrl).toEqual(expect.stringMatching(/^http/));
    const webhooks = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: boot.apiKey });
    expect([401, 403]).not.toContain(webhooks.status);

    const before = await rowCounts();
    const again = await adminJson('bootstrap');
    expect(again).toEqual({ ...boot, keyId: expect.any(String), apiKey: expect.stringMatching(/^pk_live_/) });
    expect(again.keyId).not.toBe(boot.keyId);
    expect(again.apiKey).not.toBe(boot.apiKey);
    expect(await rowCounts()).toEqual({ ...before, api_keys: before.api_keys! + 1 });
    // Both keys work: the second call does not take the first away.
    for (const apiKey of [boot.apiKey, again.apiKey]) expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey })).status).toBe(200);
    const endpoint = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: boot.apiKey, body: { url: 'https://hooks.example.com/dev', eventNames: ['webhook.test'] } });
    expect(endpoint.status).toBe(200);
    const seen = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: again.apiKey });
    expect(seen.body.endpoints.map((e: { id: string }) => e.id)).toContain(endpoint.body.endpoint.id);
  });

  it('prints a key for people, with a warning that it is shown once, as npm run admin runs it', async () => {
    // The compiled build in a process of its own, writing into a pipe.
    const run = spawnSync(path.join(ROOT, 'scripts/with-node.sh'), ['node', 'dist/admin.js', 'bootstrap'], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: t.databaseUrl, NODE_ENV: 'test' },
      encoding: 'utf8',
    });
    expect(run.status).toBe(0);
    const printed = /^apiKey: (pk_live_\S+)$/m.exec(run.stdout);
    expect(printed).not.toBeNull();
    expect(run.stdout).toContain('shown once');
    expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: printed![1]! })).status).toBe(200);
  });

  describe('refuses bad input with exit code 2, a clear message and no rows written', () => {
    let tenant: Tenant;
    let other: Tenant;
    beforeAll(async () => {
      tenant = await t.tenant();
      other = await t.tenant();
    });

    const cases: { name: string; args: () => string[]; message: RegExp }[] = [
      { name: 'an unknown plan', args: () => ['create-org', '--name', 'X', '--plan', 'gold'], message: /unknown plan "gold"/ },
      { name: 'a missing --name', args: () => ['create-org', '--plan', 'scale'], message: /--name is required/ },
      { name: 'an empty --name', args: () => ['create-org', '--name', '  ', '--plan', 'scale'], message: /--name must not be empty/ },
      { name: 'an unknown role', args: () => ['create-user', '--org', tenant.organizationId, '--email', 'x@example.com', '--role', 'superuser'], message: /unknown role "superuser"/ },
      { name: 'an organization that does not exist', args: () => ['create-user', '--org', '00000000-0000-4000-8000-000000000000', '--email', 'x@example.com', '--role', 'member'], message: /no organization/ },
      { name: 'an organization id that is not an id', args: () => ['create-user', '--org', 'acme', '--email', 'x@example.com', '--role', 'member'], message: /--org must be an id/ },
      { name: 'an unknown scope', args: () => ['create-key', '--org', tenant.organizationId, '--user', tenant.userId, '--scopes', 'connections:read,admin:all'], message: /unknown scope\(s\): admin:all/ },
      { name: 'an empty scope list', args: () => ['create-key', '--org', tenant.organizationId, '--user', tenant.userId, '--scopes', ','], message: /at least one scope/ },
      { name: 'a user of another organization', args: () => ['create-key', '--org', tenant.organizationId, '--user', other.userId, '--scopes', 'connections:read'], message: /no user .* in organization/ },
      { name: 'an unknown command', args: () => ['create-everything'], message: /unknown command "create-everything"/ },
      { name: 'an unknown option', args: () => ['create-org', '--nmae', 'X', '--plan', 'scale'], message: /--nmae/ },
      { name: 'a key id that is not an id', args: () => ['revoke-key', '--key', 'pk_live_abc'], message: /--key must be an id/ },
    ];

    it.each(cases)('$name', async ({ args, message }) => {
      const before = await rowCounts();
      const run = await admin(...args(), '--json');
      expect(run.status).toBe(2);
      expect(run.stderr).toMatch(message);
      expect(run.stderr).toContain('usage:');
      expect(run.stdout).toBe('');
      expect(await rowCounts()).toEqual(before);
    });

    it('refuses a second user with the same email in one organization', async () => {
      const first = await admin('create-user', '--org', tenant.organizationId, '--email', 'twin@example.com', '--role', 'member', '--json');
      expect(first.status).toBe(0);
      const before = await rowCounts();
      const second = await admin('create-user', '--org', tenant.organizationId, '--email', 'TWIN@example.com', '--role', 'viewer', '--json');
      expect(second.status).toBe(2);
      expect(second.stderr).toMatch(/already a user/);
      expect(await rowCounts()).toEqual(before);
    });
  });
});
