import { StateSigner, type StatePayload } from '../../src/connections/state';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import {
  TRANSPORTS,
  approveInSandbox,
  connectThroughSandbox,
  connectionsApi,
  expectRefusal,
  forgetConnections,
  inAnHour,
  rows,
  verifiedConnection,
  type ConnectionsApi,
} from './flow-helpers';

const MINUTE = 60 * 1000;

let clock = Date.now();
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { now: () => clock, listen: false });
});
beforeEach(() => {
  clock = Date.now();
});
afterEach(async () => {
  await forgetConnections(t);
});
afterAll(async () => {
  await t.close();
});

function payloadOf(state: string): StatePayload {
  const [, body] = state.split('.');
  return JSON.parse(Buffer.from(body ?? '', 'base64url').toString('utf8')) as StatePayload;
}

function withPayloadBitFlipped(state: string): string {
  const [version, body, mac] = state.split('.');
  const bytes = Buffer.from(body ?? '', 'base64url');
  // Flips the lowest bit of the last character of the user id: still valid JSON, another user.
  const at = bytes.lastIndexOf(Buffer.from('","toolkit"')) - 1;
  bytes[at] = (bytes[at] ?? 0) ^ 1;
  return `${version}.${bytes.toString('base64url')}.${mac}`;
}

async function destinationRow(id: string) {
  const [row] = await rows(t, 'select * from connections where id = ?', [id]);
  return row;
}

describe.each(TRANSPORTS)('over %s', (transport) => {
  let api: ConnectionsApi;
  let owner: Tenant;
  beforeEach(async () => {
    api = connectionsApi(t, transport);
    owner = await t.tenant();
  });

  describe('starting a connection', () => {
    it.each(['twitter', 'tiktok', 'pinterest', 'mastodon', 'google_business', ''])(
      'refuses to start a connection for "%s" as CAPABILITY_UNSUPPORTED and records no attempt',
      async (toolkit) => {
        await expectRefusal(api.start(owner.apiKey, { toolkit }), 'CAPABILITY_UNSUPPORTED');
        expect(await rows(t, 'select id from connection_attempts where organization_id = ?', [owner.organizationId])).toEqual([]);
      },
    );
  });

  describe('the signed state', () => {
    async function startedAndApproved(apiKey = owner.apiKey) {
      const started = await api.start(apiKey, { toolkit: 'instagram' });
      return approveInSandbox(t, started.redirectUrl, 'bakery');
    }

    async function expectNoDestination(organizationId: string) {
      expect(await rows(t, 'select id from connections where organization_id = ?', [organizationId])).toEqual([]);
    }

    it('refuses a state with a bit flipped in its payload', async () => {
      const callback = await startedAndApproved();
      const tampered = withPayloadBitFlipped(callback.state);
      expect(payloadOf(tampered).userId).not.toBe(owner.userId);
      await expectRefusal(api.complete(owner.apiKey, { ...callback, state: tampered }), 'STATE_INVALID');
      await expectNoDestination(owner.organizationId);
    });

    it('refuses a truncated state', async () => {
      const callback = await startedAndApproved();
      await expectRefusal(api.complete(owner.apiKey, { ...callback, state: callback.state.slice(0, -1) }), 'STATE_INVALID');
      await expectRefusal(api.complete(owner.apiKey, { ...callback, state: callback.state.split('.').slice(0, 2).join('.') }), 'STATE_INVALID');
      await expectNoDestination(owner.organizationId);
    });

    it('refuses a state signed with another key', async () => {
      const callback = await startedAndApproved();
      const { nonce: _nonce, ...fields } = payloadOf(callback.state);
      const forged = new StateSigner(Buffer.from('x'.repeat(40))).sign(fields);
      await expectRefusal(api.complete(owner.apiKey, { ...callback, state: forged }), 'STATE_INVALID');
      await expectNoDestination(owner.organizationId);
    });

    it('accepts a state just inside its 15 minutes', async () => {
      const callback = await startedAndApproved();
      clock += 15 * MINUTE - 1000;
      const { connection } = await api.complete(owner.apiKey, callback);
      expect(connection?.status).toBe('connected');
    });

    it('refuses a state older than 15 minutes as STATE_EXPIRED', async () => {
      const callback = await startedAndApproved();
      clock += 15 * MINUTE + 1000;
      await expectRefusal(api.complete(owner.apiKey, callback), 'STATE_EXPIRED');
      await expectNoDestination(owner.organizationId);
    });

    it('refuses a state completed by another person of the same organization, and leaves it to its owner', async () => {
      const callback = await startedAndApproved();
      const colleague = await owner.colleague('owner');
      await expectRefusal(api.complete(colleague.apiKey, callback), 'STATE_USER_MISMATCH');
      await expectNoDestination(owner.organizationId);
      const { connection } = await api.complete(owner.apiKey, callback);
      expect(connection?.status).toBe('connected');
    });

    it('refuses a state completed in another organization', async () => {
      const callback = await startedAndApproved();
      const stranger = await t.tenant();
      await expectRefusal(api.complete(stranger.apiKey, callback), 'STATE_ORGANIZATION_MISMATCH');
      await expectNoDestination(owner.organizationId);
      await expectNoDestination(stranger.organizationId);
    });

    it('refuses to complete the same state twice', async () => {
      const callback = await startedAndApproved();
      const { connection } = await api.complete(owner.apiKey, callback);
      await expectRefusal(api.complete(owner.apiKey, callback), 'STATE_ALREADY_USED');
      expect(await rows(t, 'select id from connections where organization_id = ?', [owner.organizationId])).toEqual([{ id: connection!.id }]);
    });

    it('lets only one of two simultaneous completions of the same state through', async () => {
      const callback = await startedAndApproved();
      const outcomes = await Promise.allSettled([api.complete(owner.apiKey, callback), api.complete(owner.apiKey, callback)]);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      const [lost] = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []));
      await expectRefusal(Promise.reject(lost), 'STATE_ALREADY_USED');
      expect(await rows(t, 'select count(*)::int as n from connections where organization_id = ?', [owner.organizationId])).toEqual([{ n: 1 }]);
    });

    it('refuses an account reference the provider does not know, or one of another toolkit, and keeps the attempt usable', async () => {
      const callback = await startedAndApproved();
      await expectRefusal(api.complete(owner.apiKey, { ...callback, connectedAccountId: 'sbx.instagram.nobody' }), 'PROVIDER_ACCOUNT_NOT_FOUND');
      await expectRefusal(api.complete(owner.apiKey, { ...callback, connectedAccountId: 'sbx.facebook.page' }), 'PROVIDER_ACCOUNT_MISMATCH');
      await expectNoDestination(owner.organizationId);
      expect((await api.complete(owner.apiKey, callback)).connection?.identity?.accountId).toBe('17841400000000001');
    });

    it("refuses a sample account this attempt's consent never returned, and keeps the attempt usable", async () => {
      const started = await api.start(owner.apiKey, { toolkit: 'instagram' });
      const callback = await approveInSandbox(t, started.redirectUrl, 'bakery');
      const [, toolkit, key] = callback.connectedAccountId.split('.');
      expect([toolkit, key]).toEqual(['instagram', 'bakery']);
      await expectRefusal(api.complete(owner.apiKey, { state: started.state, connectedAccountId: 'sbx.instagram.creator' }), 'PROVIDER_ACCOUNT_MISMATCH');
      await expectRefusal(api.complete(owner.apiKey, { state: started.state, connectedAccountId: 'sbx.instagram.bakery' }), 'PROVIDER_ACCOUNT_MISMATCH');
      const forged = callback.connectedAccountId.replace('.bakery.', '.creator.');
      await expectRefusal(api.complete(owner.apiKey, { state: started.state, connectedAccountId: forged }), 'PROVIDER_ACCOUNT_MISMATCH');
      await expectNoDestination(owner.organizationId);
      expect((await api.complete(owner.apiKey, callback)).connection?.identity?.accountId).toBe('17841400000000001');
    });

    it('refuses an account approved in the consent of another attempt of the same person', async () => {
      const other = await startedAndApproved();
      const started = await api.start(owner.apiKey, { toolkit: 'instagram' });
      await expectRefusal(api.complete(owner.apiKey, { state: started.state, connectedAccountId: other.connectedAccountId }), 'PROVIDER_ACCOUNT_MISMATCH');
      await expectNoDestination(owner.organizationId);
      expect((await api.complete(owner.apiKey, other)).connection?.identity?.accountId).toBe('17841400000000001');
    });

    it('refuses a completion without the connected account reference', async () => {
      const callback = await startedAndApproved();
      await expectRefusal(api.complete(owner.apiKey, { state: callback.state }), 'CONNECTED_ACCOUNT_REQUIRED');
      await expectRefusal(api.complete(owner.apiKey, { state: callback.state, connectedAccountId: '  ' }), 'CONNECTED_ACCOUNT_REQUIRED');
      await expectNoDestination(owner.organizationId);
    });
  });

  describe('confirming', () => {
    it.each([
      ['false', false],
      ['missing', undefined],
    ])('refuses to confirm when confirmIdentity is %s', async (_label, confirmIdentity) => {
      const { connection } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery');
      await expectRefusal(api.confirm(owner.apiKey, connection!.id, confirmIdentity), 'CONFIRMATION_REQUIRED');
      expect(await destinationRow(connection!.id)).toMatchObject({ status: 'connected', verified_at: null, confirmed_account_id: null });
    });
  });

  describe('disabling', () => {
    it.each([
      ['without a reason', undefined, 'DISABLE_REASON_REQUIRED'],
      ['with an empty reason', '', 'DISABLE_REASON_REQUIRED'],
      ['with a whitespace reason', ' \t\n ', 'DISABLE_REASON_REQUIRED'],
      ['with a 501-character reason', 'r'.repeat(501), 'DISABLE_REASON_TOO_LONG'],
    ] as const)('refuses to disable %s', async (_label, reason, code) => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      await expectRefusal(api.disable(owner.apiKey, connection.id, reason), code);
      expect(await destinationRow(connection.id)).toMatchObject({ status: 'verified', disable_reason: null, disconnected_at: null });
    });

    it('accepts a reason of exactly 500 characters', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const reason = 'r'.repeat(500);
      const disabled = await api.disable(owner.apiKey, connection.id, reason);
      expect(disabled.connection).toMatchObject({ status: 'disconnected', disableReason: reason });
    });
  });

  describe('permissions', () => {
    it('refuses every connection action to a viewer as PERMISSION_DENIED', async () => {
      const { connection } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery');
      const id = connection!.id;
      const started = await api.start(owner.apiKey, { toolkit: 'facebook' });
      const callback = await approveInSandbox(t, started.redirectUrl, 'page');
      const viewer = await owner.colleague('viewer');

      await expectRefusal(api.start(viewer.apiKey, { toolkit: 'instagram' }), 'PERMISSION_DENIED');
      await expectRefusal(api.complete(viewer.apiKey, callback), 'PERMISSION_DENIED');
      await expectRefusal(api.confirm(viewer.apiKey, id, true), 'PERMISSION_DENIED');
      await expectRefusal(api.disable(viewer.apiKey, id, 'not mine to disable'), 'PERMISSION_DENIED');
      await expectRefusal(api.release(viewer.apiKey, id), 'PERMISSION_DENIED');

      expect(await destinationRow(id)).toMatchObject({ status: 'connected', confirmed_account_id: null, disable_reason: null });
      expect(await rows(t, 'select count(*)::int as n from connection_attempts where user_id = ?', [viewer.userId])).toEqual([{ n: 0 }]);
      // The viewer's refusal did not use up the owner's attempt.
      expect((await api.complete(owner.apiKey, callback)).connection?.toolkit).toBe('facebook');
    });

    it('still lets a viewer list connections', async () => {
      const viewer = await owner.colleague('viewer');
      expect((await api.list(viewer.apiKey)).connectableToolkits).toHaveLength(4);
    });

    it('refuses every connection action to a key without connections:manage as SCOPE_MISSING, even for an owner', async () => {
      const { connection } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery');
      const id = connection!.id;
      const narrow = await owner.colleague('owner', ['connections:read', 'posts:read', 'posts:write', 'webhooks:write']);

      await expectRefusal(api.start(narrow.apiKey, { toolkit: 'instagram' }), 'SCOPE_MISSING');
      await expectRefusal(api.confirm(narrow.apiKey, id, true), 'SCOPE_MISSING');
      await expectRefusal(api.disable(narrow.apiKey, id, 'narrow key'), 'SCOPE_MISSING');
      await expectRefusal(api.release(narrow.apiKey, id), 'SCOPE_MISSING');
      expect(await destinationRow(id)).toMatchObject({ status: 'connected', confirmed_account_id: null, disable_reason: null });
    });
  });

  describe("another organization's connection", () => {
    it('is not found for confirm, disable, reconnect and release, and stays untouched', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      await api.schedule(owner.apiKey, { connectionId: connection.id, text: 'Ours', scheduledAt: inAnHour(clock) });
      const before = await destinationRow(connection.id);
      const stranger = await t.tenant();

      await expectRefusal(api.confirm(stranger.apiKey, connection.id, true), 'CONNECTION_NOT_FOUND');
      await expectRefusal(api.disable(stranger.apiKey, connection.id, 'not yours'), 'CONNECTION_NOT_FOUND');
      await expectRefusal(api.start(stranger.apiKey, { toolkit: 'instagram', connectionId: connection.id }), 'CONNECTION_NOT_FOUND');
      await expectRefusal(api.release(stranger.apiKey, connection.id), 'CONNECTION_NOT_FOUND');
      await expectRefusal(api.schedule(stranger.apiKey, { connectionId: connection.id, text: 'Theirs', scheduledAt: inAnHour(clock) }), 'CONNECTION_NOT_FOUND');

      expect(await destinationRow(connection.id)).toEqual(before);
      expect(await rows(t, 'select text, status from posts where connection_id = ?', [connection.id])).toEqual([{ text: 'Ours', status: 'scheduled' }]);
      expect(await rows(t, 'select id from connection_attempts where organization_id = ?', [stranger.organizationId])).toEqual([]);
    });

    it('is not found for an id that is not a uuid either', async () => {
      await expectRefusal(api.confirm(owner.apiKey, 'not-a-uuid', true), 'CONNECTION_NOT_FOUND');
      await expectRefusal(api.disable(owner.apiKey, '00000000-0000-4000-8000-000000000000', 'gone'), 'CONNECTION_NOT_FOUND');
    });
  });
});
