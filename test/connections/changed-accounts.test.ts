import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { TRANSPORTS, connectionsApi, connectThroughSandbox, expectRefusal, forgetConnections } from './flow-helpers';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t.close());

describe.each(TRANSPORTS)('a changed account over %s', (transport) => {
  let tenant: Tenant;
  beforeEach(async () => {
    tenant = await t.tenant();
    await forgetConnections(t);
  });

  it('needs an owner or admin even when the first account was never confirmed', async () => {
    const api = connectionsApi(t, transport);
    const member = await tenant.colleague('member');
    const first = await connectThroughSandbox(t, api, member.apiKey, 'youtube', 'channel');
    const id = first.connection!.id;
    const reconnected = await connectThroughSandbox(t, api, member.apiKey, 'youtube', 'channel2', { connectionId: id });
    expect(reconnected.connection!.status).toBe('held');
    await expectRefusal(api.confirm(member.apiKey, id, true), 'OWNER_OR_ADMIN_REQUIRED');
    const confirmed = await api.confirm(tenant.apiKey, id, true);
    expect(confirmed.connection!.status).toBe('verified');
    expect(confirmed.connection!.confirmedAccountId).toBe('UCsandbox000000000000002');
  });
});

describe('the sandbox consent page', () => {
  it('refuses to send the browser to a callback that is not this service', async () => {
    const page = new URL('/sandbox/consent/approve', t.url);
    page.search = new URLSearchParams({ toolkit: 'instagram', state: 'v1.x.y', callback: 'https://evil.example/steal', account: 'bakery' }).toString();
    const res = await fetch(page, { redirect: 'manual' });
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
  });
});

describe('links the service hands out', () => {
  it('point at the port the listener bound when PUBLIC_URL is unset', async () => {
    const tenant = await t.tenant();
    const api = connectionsApi(t, 'rest');
    const started = await api.start(tenant.apiKey, { toolkit: 'linkedin' });
    const redirect = new URL(started.redirectUrl);
    expect(redirect.port).toBe(String(t.app.port));
    expect(new URL(redirect.searchParams.get('callback') ?? '').port).toBe(String(t.app.port));
    const consent = await fetch(started.redirectUrl);
    expect(consent.status).toBe(200);
  });
});
