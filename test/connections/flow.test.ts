import { timestampDate, timestampFromDate } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { PostService } from '../../src/gen/publishing/v1/post_service_pb';
import { startTestApp, type TestApp } from '../support/app';
import { TRANSPORTS, approveInSandbox, connectThroughSandbox, connectionsApi, forgetConnections, inAnHour, rows } from './flow-helpers';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { listen: false });
});
afterEach(async () => {
  await forgetConnections(t);
});
afterAll(async () => {
  await t.close();
});

/** The sandbox's reference names the account and carries the approval of one attempt's consent. */
const refOf = (toolkit: string, account: string) => expect.stringMatching(new RegExp(`^sbx\\.${toolkit}\\.${account}\\.[\\w-]{22}$`));
const BAKERY = { ref: refOf('instagram', 'bakery'), accountId: '17841400000000001', kind: 'business', displayName: 'Sandbox Bakery', handle: 'sandboxbakery' };

describe('connecting an account, browser-style, over REST', () => {
  it('starts, consents in the sandbox, completes, confirms and then accepts a scheduled post', async () => {
    const owner = await t.tenant();

    const started = await t.rest('POST', '/api/v1/connections/start', { apiKey: owner.apiKey, body: { toolkit: 'instagram' } });
    expect(started.status).toBe(200);
    expect(started.body).toEqual({ redirectUrl: expect.any(String), state: expect.any(String), expiresAt: expect.any(String) });
    const consentUrl = new URL(started.body.redirectUrl);
    expect(consentUrl.pathname).toBe('/sandbox/consent');
    expect(consentUrl.searchParams.get('toolkit')).toBe('instagram');
    expect(consentUrl.searchParams.get('state')).toBe(started.body.state);
    const expiresIn = Date.parse(started.body.expiresAt) - Date.now();
    expect(expiresIn).toBeGreaterThan(14 * 60 * 1000);
    expect(expiresIn).toBeLessThanOrEqual(15 * 60 * 1000);

    const consent = await t.fetch(`${consentUrl.pathname}${consentUrl.search}`);
    expect(consent.status).toBe(200);
    const html = await consent.text();
    expect(html).toContain('Approve Sandbox Bakery (business, sandboxbakery)');
    expect(html).toContain('Approve Sandy Creator (creator, sandycreates)');

    const approve = new URL('/sandbox/consent/approve', t.url);
    approve.search = consentUrl.search;
    approve.searchParams.set('account', 'bakery');
    const approved = await t.fetch(approve.href, { redirect: 'manual' });
    expect(approved.status).toBe(302);
    const callbackUrl = new URL(approved.headers.get('location') ?? '');
    expect(callbackUrl.pathname).toBe('/connections/callback');
    expect(callbackUrl.searchParams.get('state')).toBe(started.body.state);
    expect(callbackUrl.searchParams.get('connected_account_id')).toEqual(BAKERY.ref);

    const callback = await t.rest('GET', `${callbackUrl.pathname}${callbackUrl.search}`);
    expect(callback.status).toBe(200);
    expect(callback.body).toMatchObject({ state: started.body.state, connectedAccountId: BAKERY.ref });

    const completed = await t.rest('POST', '/api/v1/connections/complete', {
      apiKey: owner.apiKey,
      body: { state: callback.body.state, connectedAccountId: callback.body.connectedAccountId },
    });
    expect(completed.status).toBe(200);
    const connection = completed.body.connection;
    expect(connection).toMatchObject({
      toolkit: 'instagram',
      status: 'connected',
      identity: { accountId: BAKERY.accountId, kind: BAKERY.kind, displayName: BAKERY.displayName, handle: BAKERY.handle },
    });
    expect(connection.verifiedAt).toBeUndefined();
    expect(await rows(t, 'select organization_id, connected_account_ref, account_id, status, verified_at from connections where id = ?', [connection.id])).toEqual([
      { organization_id: owner.organizationId, connected_account_ref: BAKERY.ref, account_id: BAKERY.accountId, status: 'connected', verified_at: null },
    ]);

    const post = { connectionId: connection.id, text: 'Fresh bread at nine', scheduledAt: inAnHour().toISOString() };
    const early = await t.rest('POST', '/api/v1/posts', { apiKey: owner.apiKey, body: post });
    expect(early.status).toBe(409);
    expect(early.body).toMatchObject({ code: 'DESTINATION_NOT_VERIFIED' });
    expect(await rows(t, 'select id from posts where connection_id = ?', [connection.id])).toEqual([]);

    const confirmed = await t.rest('POST', `/api/v1/connections/${connection.id}/confirm`, { apiKey: owner.apiKey, body: { confirmIdentity: true } });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.connection).toMatchObject({ id: connection.id, status: 'verified', confirmedAccountId: BAKERY.accountId, verifiedAt: expect.any(String) });

    const scheduled = await t.rest('POST', '/api/v1/posts', { apiKey: owner.apiKey, body: post });
    expect(scheduled.status).toBe(200);
    expect(scheduled.body.post).toMatchObject({ connectionId: connection.id, text: post.text, status: 'scheduled', scheduledAt: post.scheduledAt });
    expect(await rows(t, 'select connection_id, status, text from posts where id = ?', [scheduled.body.post.id])).toEqual([
      { connection_id: connection.id, status: 'scheduled', text: post.text },
    ]);

    const listed = await t.rest('GET', '/api/v1/connections', { apiKey: owner.apiKey });
    expect(listed.status).toBe(200);
    expect(listed.body.connections).toEqual([expect.objectContaining({ id: connection.id, status: 'verified', toolkit: 'instagram' })]);
  });
});

describe('connecting an account, browser-style, over gRPC', () => {
  it('starts, consents in the sandbox, completes, confirms and then accepts a scheduled post', async () => {
    const owner = await t.tenant();
    const connections = t.client(ConnectionService, owner.apiKey);
    const posts = t.client(PostService, owner.apiKey);

    const started = await connections.startConnection({ toolkit: 'instagram' });
    expect(new URL(started.redirectUrl).pathname).toBe('/sandbox/consent');
    expect(timestampDate(started.expiresAt!).getTime() - Date.now()).toBeGreaterThan(14 * 60 * 1000);

    const callback = await approveInSandbox(t, started.redirectUrl, 'bakery');
    expect(callback).toEqual({ state: started.state, connectedAccountId: BAKERY.ref });

    const { connection } = await connections.completeConnection(callback);
    expect(connection).toMatchObject({
      toolkit: 'instagram',
      status: 'connected',
      confirmedAccountId: '',
      identity: { accountId: BAKERY.accountId, kind: BAKERY.kind, displayName: BAKERY.displayName, handle: BAKERY.handle },
    });
    const id = connection!.id;

    const post = { connectionId: id, text: 'Fresh bread at nine', scheduledAt: timestampFromDate(inAnHour()) };
    const early = await posts.schedulePost(post).catch((error: unknown) => error);
    expect(early).toBeInstanceOf(ConnectError);
    expect((early as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((early as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe('DESTINATION_NOT_VERIFIED');
    expect(await rows(t, 'select id from posts where connection_id = ?', [id])).toEqual([]);

    const confirmed = await connections.confirmConnection({ id, confirmIdentity: true });
    expect(confirmed.connection).toMatchObject({ id, status: 'verified', confirmedAccountId: BAKERY.accountId });
    expect(confirmed.connection?.verifiedAt).toBeDefined();

    const scheduled = await posts.schedulePost(post);
    expect(scheduled.post).toMatchObject({ connectionId: id, status: 'scheduled', text: post.text });
    expect(await rows(t, 'select status from posts where connection_id = ?', [id])).toEqual([{ status: 'scheduled' }]);

    const listed = await connections.listConnections({});
    expect(listed.connections.map((c) => [c.id, c.status])).toEqual([[id, 'verified']]);
  });
});

describe.each(TRANSPORTS)('connections and the registry over %s', (transport) => {
  it('lists instagram, facebook, linkedin and youtube as connectable, twitter as disabled and tiktok and pinterest as gated', async () => {
    const owner = await t.tenant();
    const listed = await connectionsApi(t, transport).list(owner.apiKey);
    expect(Object.fromEntries(listed.registry.map((toolkit) => [toolkit.slug, toolkit.status]))).toEqual({
      instagram: 'connectable',
      facebook: 'connectable',
      linkedin: 'connectable',
      youtube: 'connectable',
      twitter: 'disabled',
      tiktok: 'gated',
      pinterest: 'gated',
    });
    expect([...listed.connectableToolkits].sort()).toEqual(['facebook', 'instagram', 'linkedin', 'youtube']);
    for (const toolkit of listed.registry) {
      if (toolkit.status === 'connectable') expect(toolkit.reason).toBe('');
      else expect(toolkit.reason).not.toBe('');
    }
    expect(listed.connections).toEqual([]);
  });

  it('leaves the decentralized network and local business listings out of the registry', async () => {
    const owner = await t.tenant();
    const listed = await connectionsApi(t, transport).list(owner.apiKey);
    const known = listed.registry.flatMap((toolkit) => [toolkit.slug, toolkit.name.toLowerCase()]).join(' ');
    for (const absent of ['mastodon', 'bluesky', 'google']) expect(known).not.toContain(absent);
  });

  it.each([
    ['instagram', 'creator', 'creator', '17841400000000002'],
    ['facebook', 'page', 'page', '104000000000001'],
    ['linkedin', 'member', 'profile', 'urn:li:person:SandboxA1'],
    ['youtube', 'channel', 'channel', 'UCsandbox000000000000001'],
  ])('connects a %s account and stores the identity read back from the provider', async (toolkit, account, kind, accountId) => {
    const owner = await t.tenant();
    const api = connectionsApi(t, transport);
    const { connection } = await connectThroughSandbox(t, api, owner.apiKey, toolkit, account);
    expect(connection).toMatchObject({ toolkit, status: 'connected', identity: { accountId, kind } });
    expect(await rows(t, 'select toolkit, account_id, account_kind, connected_account_ref from connections where id = ?', [connection!.id])).toEqual([
      { toolkit, account_id: accountId, account_kind: kind, connected_account_ref: refOf(toolkit, account) },
    ]);
    const listed = await api.list(owner.apiKey);
    expect(listed.connections.map((c) => c.id)).toEqual([connection!.id]);
  });

  it('never shows one organization the connections of another', async () => {
    const first = await t.tenant();
    const second = await t.tenant();
    const api = connectionsApi(t, transport);
    await connectThroughSandbox(t, api, first.apiKey, 'facebook', 'page');
    expect((await api.list(second.apiKey)).connections).toEqual([]);
    expect((await api.list(first.apiKey)).connections).toHaveLength(1);
  });
});
