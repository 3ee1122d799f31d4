import { startTestApp, type TestApp, type Tenant } from '../support/app';
import {
  TRANSPORTS,
  connectThroughSandbox,
  connectionsApi,
  expectRefusal,
  forgetConnections,
  inAnHour,
  rows,
  verifiedConnection,
  type ConnectionsApi,
} from './flow-helpers';

const HOUR = 60 * 60 * 1000;

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

interface PostRow {
  id: string;
  status: string;
  hold_reason: string | null;
  held: boolean;
}

async function postRows(connectionId: string): Promise<PostRow[]> {
  return rows<PostRow>(t, 'select id, status, hold_reason, held_at is not null as held from posts where connection_id = ? order by scheduled_at', [connectionId]);
}

async function destinationRow(id: string) {
  const [row] = await rows(t, 'select status, account_id, confirmed_account_id, verified_at, disconnected_at is not null as disconnected, disable_reason from connections where id = ?', [id]);
  return row;
}

describe.each(TRANSPORTS)('over %s', (transport) => {
  let api: ConnectionsApi;
  let owner: Tenant;
  beforeEach(async () => {
    api = connectionsApi(t, transport);
    owner = await t.tenant();
  });

  async function schedulePosts(connectionId: string, count: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 1; i <= count; i++) {
      const { post } = await api.schedule(owner.apiKey, { connectionId, text: `Post ${i}`, scheduledAt: new Date(Date.now() + i * HOUR) });
      ids.push(post!.id);
    }
    return ids;
  }

  describe('a reconnect that returns a different account', () => {
    it('holds the connection and every scheduled post with account_changed', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const postIds = await schedulePosts(connection.id, 2);
      const bystander = await verifiedConnection(t, api, owner.apiKey, 'facebook', 'page');
      const [untouched] = await schedulePosts(bystander.id, 1);

      const { connection: reconnected, heldPosts } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'creator', {
        connectionId: connection.id,
      });

      expect(heldPosts).toBe(2);
      expect(reconnected).toMatchObject({ id: connection.id, status: 'held', identity: { accountId: '17841400000000002', kind: 'creator' } });
      expect(reconnected?.verifiedAt).toBeUndefined();
      expect(await destinationRow(connection.id)).toMatchObject({ status: 'held', account_id: '17841400000000002', verified_at: null });
      const held = await postRows(connection.id);
      expect(held.map((p) => [p.id, p.status, p.hold_reason])).toEqual(postIds.map((id) => [id, 'held', 'account_changed']));
      expect(held.map((p) => p.held)).toEqual([true, true]);
      const listed = await api.listPosts(owner.apiKey, { connectionId: connection.id });
      expect(listed.posts.map((p) => [p.status, p.holdReason])).toEqual([
        ['held', 'account_changed'],
        ['held', 'account_changed'],
      ]);
      expect(await postRows(bystander.id)).toEqual([expect.objectContaining({ id: untouched, status: 'scheduled', hold_reason: null })]);
    });

    it('refuses new posts while the connection is held', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'creator', { connectionId: connection.id });
      await expectRefusal(api.schedule(owner.apiKey, { connectionId: connection.id, text: 'Too soon', scheduledAt: inAnHour() }), 'DESTINATION_NOT_VERIFIED');
      expect(await postRows(connection.id)).toEqual([]);
    });

    it('keeps the posts held after the owner confirms, until they are released', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const postIds = await schedulePosts(connection.id, 3);
      await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'creator', { connectionId: connection.id });

      await expectRefusal(api.release(owner.apiKey, connection.id), 'DESTINATION_NOT_VERIFIED_FOR_RELEASE');
      expect((await postRows(connection.id)).map((p) => p.status)).toEqual(['held', 'held', 'held']);

      const { connection: confirmed } = await api.confirm(owner.apiKey, connection.id, true);
      expect(confirmed).toMatchObject({ status: 'verified', confirmedAccountId: '17841400000000002' });
      expect((await postRows(connection.id)).map((p) => [p.status, p.hold_reason])).toEqual([
        ['held', 'account_changed'],
        ['held', 'account_changed'],
        ['held', 'account_changed'],
      ]);

      const released = await api.release(owner.apiKey, connection.id);
      expect(released.releasedPosts).toBe(3);
      expect(await postRows(connection.id)).toEqual(postIds.map((id) => ({ id, status: 'scheduled', hold_reason: null, held: false })));
      const [event] = await rows(t, "select action, target_id, outcome from audit_events where organization_id = ? and action = 'connection.release'", [
        owner.organizationId,
      ]);
      expect(event).toEqual({ action: 'connection.release', target_id: connection.id, outcome: 'succeeded' });

      expect((await api.release(owner.apiKey, connection.id)).releasedPosts).toBe(0);
    });
  });

  describe('a reconnect that returns the same account', () => {
    it('holds nothing and keeps the connection verified', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'linkedin', 'member');
      await schedulePosts(connection.id, 2);
      const { connection: reconnected, heldPosts } = await connectThroughSandbox(t, api, owner.apiKey, 'linkedin', 'member', {
        connectionId: connection.id,
      });
      expect(heldPosts).toBe(0);
      expect(reconnected).toMatchObject({ id: connection.id, status: 'verified' });
      expect((await postRows(connection.id)).map((p) => p.status)).toEqual(['scheduled', 'scheduled']);
    });
  });

  describe('disabling', () => {
    it('disconnects the connection, stores the reason and holds scheduled posts with connection_disabled, deleting nothing', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'youtube', 'channel');
      const postIds = await schedulePosts(connection.id, 2);

      const { connection: disabled, heldPosts } = await api.disable(owner.apiKey, connection.id, '  Client paused the campaign  ');

      expect(heldPosts).toBe(2);
      expect(disabled).toMatchObject({ id: connection.id, status: 'disconnected', disableReason: 'Client paused the campaign' });
      expect(disabled?.disconnectedAt).toBeDefined();
      expect(await destinationRow(connection.id)).toMatchObject({
        status: 'disconnected',
        disable_reason: 'Client paused the campaign',
        disconnected: true,
        account_id: 'UCsandbox000000000000001',
      });
      const held = await postRows(connection.id);
      expect(held.map((p) => [p.id, p.status, p.hold_reason])).toEqual(postIds.map((id) => [id, 'held', 'connection_disabled']));
      expect((await api.list(owner.apiKey)).connections.map((c) => [c.id, c.status])).toEqual([[connection.id, 'disconnected']]);
    });

    it('refuses new posts to a disabled connection', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'youtube', 'channel');
      await api.disable(owner.apiKey, connection.id, 'Channel retired');
      await expectRefusal(api.schedule(owner.apiKey, { connectionId: connection.id, text: 'Anyone there?', scheduledAt: inAnHour() }), 'DESTINATION_NOT_VERIFIED');
      expect(await postRows(connection.id)).toEqual([]);
    });

    it('refuses to confirm a disabled connection until it is reconnected', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'youtube', 'channel');
      const [postId] = await schedulePosts(connection.id, 1);
      await api.disable(owner.apiKey, connection.id, 'Channel paused');
      await expectRefusal(api.confirm(owner.apiKey, connection.id, true), 'CONNECTION_DISCONNECTED');
      expect(await destinationRow(connection.id)).toMatchObject({ status: 'disconnected' });

      const { connection: reconnected } = await connectThroughSandbox(t, api, owner.apiKey, 'youtube', 'channel', { connectionId: connection.id });
      expect(reconnected).toMatchObject({ status: 'connected', disableReason: '' });
      await api.confirm(owner.apiKey, connection.id, true);
      expect(await postRows(connection.id)).toEqual([expect.objectContaining({ id: postId, status: 'held', hold_reason: 'connection_disabled' })]);
      expect((await api.release(owner.apiKey, connection.id)).releasedPosts).toBe(1);
      expect(await postRows(connection.id)).toEqual([expect.objectContaining({ id: postId, status: 'scheduled', hold_reason: null })]);
    });

    it('holds a disabled connection for re-review when its reconnect returns a different account, without the old disable', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'youtube', 'channel');
      const [postId] = await schedulePosts(connection.id, 1);
      await api.disable(owner.apiKey, connection.id, 'Channel retired');

      const { connection: reconnected } = await connectThroughSandbox(t, api, owner.apiKey, 'youtube', 'channel2', { connectionId: connection.id });
      expect(reconnected).toMatchObject({ status: 'held', disableReason: '', identity: { accountId: 'UCsandbox000000000000002' } });
      expect(reconnected?.disconnectedAt).toBeUndefined();
      expect(await destinationRow(connection.id)).toMatchObject({ status: 'held', disconnected: false, disable_reason: null });

      const { connection: confirmed } = await api.confirm(owner.apiKey, connection.id, true);
      expect(confirmed).toMatchObject({ status: 'verified', disableReason: '', confirmedAccountId: 'UCsandbox000000000000002' });
      expect(await postRows(connection.id)).toEqual([expect.objectContaining({ id: postId, status: 'held', hold_reason: 'connection_disabled' })]);
    });
  });
});
