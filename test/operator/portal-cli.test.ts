import { portalSessionMain } from '../../src/operator/portal-cli';
import { startTestApp, type TestApp } from '../support/app';

/** `npm run operator -- portal-session ...`: minting and revoking portal sessions with the operator credential. */
let t: TestApp;

beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t?.close());

async function portal(args: string[], env: Record<string, string> = {}): Promise<{ status: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const status = await portalSessionMain(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken, ...env },
  });
  return { status, stdout, stderr };
}

it('mints a session whose link opens the portal once, and revokes it', async () => {
  const tenant = await t.tenant();
  const created = await portal(['create', '--org', tenant.organizationId, '--hours', '2', '--capabilities', 'resend', '--json']);
  expect(created).toMatchObject({ status: 0, stderr: '' });
  const { sessionId, link } = JSON.parse(created.stdout) as { sessionId: string; link: string };
  expect(link).toMatch(new RegExp(`^${t.url}/portal/start\\?token=pps_`));
  const start = await fetch(link, { redirect: 'manual' });
  expect([start.status, start.headers.get('location')]).toEqual([303, '/portal/']);
  const [row] = await t.orm.em.fork().execute<{ capabilities: string[]; created_by: string; hours: number }[]>(
    'select capabilities, created_by, round(extract(epoch from expires_at - created_at) / 3600)::int as hours from portal_sessions where id = ?',
    [sessionId],
  );
  expect(row).toEqual({ capabilities: ['read', 'resend'], created_by: 'operator', hours: 2 });

  const revoked = await portal(['revoke', '--org', tenant.organizationId, '--session', sessionId]);
  expect(revoked.status).toBe(0);
  expect(revoked.stdout).toContain(`session ${sessionId}`);
  expect((await portal(['revoke-all', '--org', tenant.organizationId])).stdout).toBe('revoked 0 session(s)\n');
});

it('refuses bad usage before calling, and says what the service refused', async () => {
  const tenant = await t.tenant();
  expect((await portal(['create', '--org', 'nope'])).status).toBe(2);
  expect((await portal(['create', '--org', tenant.organizationId, '--hours', '200'])).status).toBe(2);
  const refused = await portal(['create', '--org', tenant.organizationId, '--capabilities', 'admin']);
  expect(refused.status).toBe(1);
  expect(refused.stderr).toContain('PORTAL_CAPABILITY_INVALID');
  const internal = await portal(['revoke-all', '--org', tenant.organizationId], { OPERATOR_TOKEN: 'not-the-operator-token-0123456789abcdef' });
  expect([internal.status, internal.stderr.includes('INTERNAL_CREDENTIAL_REQUIRED')]).toEqual([1, true]);
  expect((await portal(['revoke-all', '--org', tenant.organizationId], { OPERATOR_TOKEN: tenant.apiKey })).status).toBe(2);
});
