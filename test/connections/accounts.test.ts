import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
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

const BAKERY_ACCOUNT_ID = '17841400000000001';
const CREATOR_ACCOUNT_ID = '17841400000000002';

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

async function destinationRow(id: string) {
  const [row] = await rows(t, 'select * from connections where id = ?', [id]);
  return row;
}

describe('the database', () => {
  it('refuses a second destination for the same toolkit and account, whatever the organization', async () => {
    const first = await t.tenant();
    const second = await t.tenant();
    const db = new Client({ connectionString: t.databaseUrl });
    await db.connect();
    try {
      const insert = (organizationId: string) =>
        db.query(
          `insert into connections (id, organization_id, toolkit, status, connected_account_ref, account_id, account_kind,
                                     display_name, handle, avatar_url, created_at, updated_at)
           values ($1, $2, 'instagram', 'connected', 'sbx.instagram.bakery', $3, 'business', 'Sandbox Bakery', 'sandboxbakery', '', now(), now())`,
          [randomUUID(), organizationId, BAKERY_ACCOUNT_ID],
        );
      await insert(first.organizationId);
      await expect(insert(second.organizationId)).rejects.toMatchObject({ code: '23505', constraint: 'connections_account_unique' });
      await expect(insert(first.organizationId)).rejects.toMatchObject({ code: '23505', constraint: 'connections_account_unique' });
      const { rows: held } = await db.query('select organization_id from connections where account_id = $1', [BAKERY_ACCOUNT_ID]);
      expect(held).toEqual([{ organization_id: first.organizationId }]);
    } finally {
      await db.end();
    }
  });
});

describe.each(TRANSPORTS)('over %s', (transport) => {
  let api: ConnectionsApi;
  let owner: Tenant;
  beforeEach(async () => {
    api = connectionsApi(t, transport);
    owner = await t.tenant();
  });

  describe('one account, one organization', () => {
    it('refuses an account already connected to another organization, and leaves the first intact', async () => {
      const first = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      await api.schedule(owner.apiKey, { connectionId: first.id, text: 'Ours', scheduledAt: inAnHour() });
      const before = await destinationRow(first.id);

      const other = await t.tenant();
      await expectRefusal(connectThroughSandbox(t, api, other.apiKey, 'instagram', 'bakery'), 'ACCOUNT_REGISTERED_ELSEWHERE');

      expect(await rows(t, 'select id from connections where organization_id = ?', [other.organizationId])).toEqual([]);
      expect(await destinationRow(first.id)).toEqual(before);
      expect(before).toMatchObject({ organization_id: owner.organizationId, status: 'verified', account_id: BAKERY_ACCOUNT_ID });
      expect(await rows(t, 'select status from posts where connection_id = ?', [first.id])).toEqual([{ status: 'scheduled' }]);
    });

    it('refuses to reconnect onto an account another organization holds', async () => {
      const theirs = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const other = await t.tenant();
      const ours = await verifiedConnection(t, api, other.apiKey, 'instagram', 'creator');
      const before = [await destinationRow(theirs.id), await destinationRow(ours.id)];

      await expectRefusal(connectThroughSandbox(t, api, other.apiKey, 'instagram', 'bakery', { connectionId: ours.id }), 'ACCOUNT_REGISTERED_ELSEWHERE');
      expect([await destinationRow(theirs.id), await destinationRow(ours.id)]).toEqual(before);
    });

    it('refuses the same account twice in one organization as ACCOUNT_ALREADY_CONNECTED', async () => {
      const { connection } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery');
      const colleague = await owner.colleague('member');
      const refusal = await expectRefusal(connectThroughSandbox(t, api, colleague.apiKey, 'instagram', 'bakery'), 'ACCOUNT_ALREADY_CONNECTED');
      if (transport === 'rest') expect(refusal.body).toMatchObject({ details: { connectionId: connection!.id } });
      await expectRefusal(connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery'), 'ACCOUNT_ALREADY_CONNECTED');
      expect(await rows(t, 'select id from connections where organization_id = ?', [owner.organizationId])).toEqual([{ id: connection!.id }]);
    });

    it('lets only one of two organizations completing the same account at once win', async () => {
      const other = await t.tenant();
      const callbacks = await Promise.all(
        [owner, other].map(async (tenant) => {
          const started = await api.start(tenant.apiKey, { toolkit: 'youtube' });
          return approveInSandbox(t, started.redirectUrl, 'channel');
        }),
      );
      const outcomes = await Promise.allSettled([api.complete(owner.apiKey, callbacks[0]!), api.complete(other.apiKey, callbacks[1]!)]);
      const won = outcomes.filter((o) => o.status === 'fulfilled');
      const lost = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []));
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      await expectRefusal(Promise.reject(lost[0]), 'ACCOUNT_REGISTERED_ELSEWHERE');
      expect(await rows(t, "select count(*)::int as n from connections where toolkit = 'youtube'")).toEqual([{ n: 1 }]);
    });

    it('tells two people of one organization completing the same account at once that it is already connected', async () => {
      const colleague = await owner.colleague('member');
      const callbacks = await Promise.all(
        [owner, colleague].map(async (person) => {
          const started = await api.start(person.apiKey, { toolkit: 'youtube' });
          return approveInSandbox(t, started.redirectUrl, 'channel');
        }),
      );
      const outcomes = await Promise.allSettled([api.complete(owner.apiKey, callbacks[0]!), api.complete(colleague.apiKey, callbacks[1]!)]);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      const [lost] = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []));
      await expectRefusal(Promise.reject(lost), 'ACCOUNT_ALREADY_CONNECTED');
      expect(await rows(t, 'select count(*)::int as n from connections where organization_id = ?', [owner.organizationId])).toEqual([{ n: 1 }]);
    });
  });

  describe('confirming after a reconnect returned a different account', () => {
    async function reconnectedToAnotherAccount() {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const { connection: reconnected } = await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'creator', { connectionId: connection.id });
      expect(reconnected).toMatchObject({ id: connection.id, status: 'held', confirmedAccountId: BAKERY_ACCOUNT_ID, identity: { accountId: CREATOR_ACCOUNT_ID } });
      return connection.id;
    }

    it('refuses to confirm a changed account for a member', async () => {
      const id = await reconnectedToAnotherAccount();
      const member = await owner.colleague('member');
      const refusal = await expectRefusal(api.confirm(member.apiKey, id, true), 'OWNER_OR_ADMIN_REQUIRED');
      if (transport === 'rest') expect(refusal.body).toMatchObject({ details: { previousAccountId: BAKERY_ACCOUNT_ID, accountId: CREATOR_ACCOUNT_ID } });
      expect(await destinationRow(id)).toMatchObject({ status: 'held', confirmed_account_id: BAKERY_ACCOUNT_ID, verified_at: null });
    });

    it('refuses a member even when the member did the reconnect', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const member = await owner.colleague('member');
      await connectThroughSandbox(t, api, member.apiKey, 'instagram', 'creator', { connectionId: connection.id });
      await expectRefusal(api.confirm(member.apiKey, connection.id, true), 'OWNER_OR_ADMIN_REQUIRED');
      expect(await destinationRow(connection.id)).toMatchObject({ status: 'held', confirmed_account_id: BAKERY_ACCOUNT_ID });
    });

    it.each(['owner', 'admin'] as const)('lets an %s confirm a changed account', async (role) => {
      const id = await reconnectedToAnotherAccount();
      const confirmer = await owner.colleague(role);
      const { connection } = await api.confirm(confirmer.apiKey, id, true);
      expect(connection).toMatchObject({ id, status: 'verified', confirmedAccountId: CREATOR_ACCOUNT_ID });
      expect(await destinationRow(id)).toMatchObject({ status: 'verified', confirmed_account_id: CREATOR_ACCOUNT_ID, account_id: CREATOR_ACCOUNT_ID });
    });
  });

  describe('confirming an unchanged account', () => {
    it('lets a member confirm a first connection', async () => {
      const member = await owner.colleague('member');
      const { connection } = await connectThroughSandbox(t, api, member.apiKey, 'instagram', 'bakery');
      const confirmed = await api.confirm(member.apiKey, connection!.id, true);
      expect(confirmed.connection).toMatchObject({ status: 'verified', confirmedAccountId: BAKERY_ACCOUNT_ID });
    });

    it('lets a member confirm after a reconnect that returned the same account', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      const member = await owner.colleague('member');
      const { connection: reconnected, heldPosts } = await connectThroughSandbox(t, api, member.apiKey, 'instagram', 'bakery', {
        connectionId: connection.id,
      });
      expect(reconnected).toMatchObject({ id: connection.id, status: 'verified' });
      expect(heldPosts).toBe(0);
      const confirmed = await api.confirm(member.apiKey, connection.id, true);
      expect(confirmed.connection).toMatchObject({ status: 'verified', confirmedAccountId: BAKERY_ACCOUNT_ID });
    });
  });
});
