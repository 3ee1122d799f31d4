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

interface AuditRow {
  organization_id: string | null;
  actor_user_id: string | null;
  api_key_id: string | null;
  action: string;
  target_id: string | null;
  outcome: string;
  reason: string | null;
  request_id: string | null;
}

async function auditOf(organizationId: string): Promise<AuditRow[]> {
  return rows<AuditRow>(
    t,
    `select organization_id, actor_user_id, api_key_id, action, target_id, outcome, reason, request_id
       from audit_events where organization_id = ? order by id`,
    [organizationId],
  );
}

/** The newest event of the organization. */
async function lastAuditOf(organizationId: string): Promise<AuditRow | undefined> {
  return (await auditOf(organizationId)).at(-1);
}

describe.each(TRANSPORTS)('over %s', (transport) => {
  let api: ConnectionsApi;
  let owner: Tenant;
  beforeEach(async () => {
    api = connectionsApi(t, transport);
    owner = await t.tenant();
  });

  const by = (tenant: { userId: string; keyId: string }) => ({ actor_user_id: tenant.userId, api_key_id: tenant.keyId });

  describe('every action', () => {
    it('records start, complete, confirm, disable and release with who, what, target, outcome and request id', async () => {
      const actor = { organization_id: owner.organizationId, ...by(owner), outcome: 'succeeded', reason: null };

      const started = await api.start(owner.apiKey, { toolkit: 'instagram' });
      const startRequest = api.lastRequestId;
      const [attempt] = await rows<{ id: string }>(t, 'select id from connection_attempts where organization_id = ?', [owner.organizationId]);
      const callback = await approveInSandbox(t, started.redirectUrl, 'bakery');
      const { connection } = await api.complete(owner.apiKey, callback);
      const completeRequest = api.lastRequestId;
      const id = connection!.id;
      await api.confirm(owner.apiKey, id, true);
      const confirmRequest = api.lastRequestId;
      await api.schedule(owner.apiKey, { connectionId: id, text: 'Audited', scheduledAt: inAnHour(clock) });
      await api.disable(owner.apiKey, id, 'Season over');
      const disableRequest = api.lastRequestId;
      await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'bakery', { connectionId: id });
      await api.confirm(owner.apiKey, id, true);
      await api.release(owner.apiKey, id);
      const releaseRequest = api.lastRequestId;

      const events = await auditOf(owner.organizationId);
      expect(events.map((e) => e.action)).toEqual([
        'connection.start',
        'connection.complete',
        'connection.confirm',
        'connection.disable',
        'connection.start',
        'connection.complete',
        'connection.confirm',
        'connection.release',
      ]);
      expect(events[0]).toEqual({ ...actor, action: 'connection.start', target_id: attempt!.id, request_id: startRequest });
      expect(events[1]).toEqual({ ...actor, action: 'connection.complete', target_id: id, request_id: completeRequest });
      expect(events[2]).toEqual({ ...actor, action: 'connection.confirm', target_id: id, request_id: confirmRequest });
      expect(events[3]).toEqual({ ...actor, action: 'connection.disable', target_id: id, request_id: disableRequest });
      expect(events[7]).toEqual({ ...actor, action: 'connection.release', target_id: id, request_id: releaseRequest });
      for (const event of events) expect(event.request_id).toMatch(/\S/);
    });

    it('keeps the reason of a disable and the number of held posts in the event details', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'facebook', 'page');
      await api.schedule(owner.apiKey, { connectionId: connection.id, text: 'Held soon', scheduledAt: inAnHour(clock) });
      await api.disable(owner.apiKey, connection.id, 'Page handed back to the client');
      const [event] = await rows<{ details: unknown }>(
        t,
        "select details from audit_events where organization_id = ? and action = 'connection.disable'",
        [owner.organizationId],
      );
      expect(event?.details).toEqual({ reason: 'Page handed back to the client', heldPosts: 1 });
    });
  });

  describe('refusals', () => {
    it('records a permission refusal with the actor and the reason code', async () => {
      const viewer = await owner.colleague('viewer');
      const refusal = await expectRefusal(api.start(viewer.apiKey, { toolkit: 'instagram' }), 'PERMISSION_DENIED');
      expect(await auditOf(owner.organizationId)).toEqual([
        {
          organization_id: owner.organizationId,
          ...by(viewer),
          action: 'connection.start',
          target_id: null,
          outcome: 'refused',
          reason: 'PERMISSION_DENIED',
          request_id: transport === 'rest' ? refusal.requestId : api.lastRequestId,
        },
      ]);
    });

    it('records an expired state as refused with STATE_EXPIRED, and nothing else of the attempt', async () => {
      const started = await api.start(owner.apiKey, { toolkit: 'instagram' });
      const callback = await approveInSandbox(t, started.redirectUrl, 'bakery');
      clock += 16 * 60 * 1000;
      await expectRefusal(api.complete(owner.apiKey, callback), 'STATE_EXPIRED');
      expect(await lastAuditOf(owner.organizationId)).toMatchObject({
        ...by(owner),
        action: 'connection.complete',
        outcome: 'refused',
        reason: 'STATE_EXPIRED',
        request_id: api.lastRequestId,
      });
      expect(await rows(t, 'select id from connections where organization_id = ?', [owner.organizationId])).toEqual([]);
    });

    it("records another organization's state as refused with STATE_ORGANIZATION_MISMATCH in the caller's organization", async () => {
      const started = await api.start(owner.apiKey, { toolkit: 'instagram' });
      const callback = await approveInSandbox(t, started.redirectUrl, 'bakery');
      const stranger = await t.tenant();
      await expectRefusal(api.complete(stranger.apiKey, callback), 'STATE_ORGANIZATION_MISMATCH');
      expect(await auditOf(stranger.organizationId)).toEqual([
        expect.objectContaining({
          organization_id: stranger.organizationId,
          ...by(stranger),
          action: 'connection.complete',
          outcome: 'refused',
          reason: 'STATE_ORGANIZATION_MISMATCH',
        }),
      ]);
      expect((await auditOf(owner.organizationId)).map((e) => e.action)).toEqual(['connection.start']);
    });

    it('records an account registered to another organization as refused with ACCOUNT_REGISTERED_ELSEWHERE', async () => {
      await connectThroughSandbox(t, api, owner.apiKey, 'linkedin', 'member');
      const other = await t.tenant();
      const started = await api.start(other.apiKey, { toolkit: 'linkedin' });
      const [attempt] = await rows<{ id: string }>(t, 'select id from connection_attempts where organization_id = ?', [other.organizationId]);
      const callback = await approveInSandbox(t, started.redirectUrl, 'member');
      await expectRefusal(api.complete(other.apiKey, callback), 'ACCOUNT_REGISTERED_ELSEWHERE');
      expect(await lastAuditOf(other.organizationId)).toEqual({
        organization_id: other.organizationId,
        ...by(other),
        action: 'connection.complete',
        target_id: attempt!.id,
        outcome: 'refused',
        reason: 'ACCOUNT_REGISTERED_ELSEWHERE',
        request_id: api.lastRequestId,
      });
    });

    it('records a refused confirmation of a changed account against the connection', async () => {
      const connection = await verifiedConnection(t, api, owner.apiKey, 'instagram', 'bakery');
      await connectThroughSandbox(t, api, owner.apiKey, 'instagram', 'creator', { connectionId: connection.id });
      const member = await owner.colleague('member');
      await expectRefusal(api.confirm(member.apiKey, connection.id, true), 'OWNER_OR_ADMIN_REQUIRED');
      expect(await lastAuditOf(owner.organizationId)).toMatchObject({
        ...by(member),
        action: 'connection.confirm',
        target_id: connection.id,
        outcome: 'refused',
        reason: 'OWNER_OR_ADMIN_REQUIRED',
      });
    });
  });
});

describe('the audit trail', () => {
  async function connectedAs<T>(url: string, fn: (db: Client) => Promise<T>): Promise<T> {
    const db = new Client({ connectionString: url });
    await db.connect();
    try {
      return await fn(db);
    } finally {
      await db.end();
    }
  }

  async function withEvents(): Promise<Tenant> {
    const owner = await t.tenant();
    await verifiedConnection(t, connectionsApi(t, 'rest'), owner.apiKey, 'instagram', 'bakery');
    return owner;
  }

  const TAMPERING = [
    ['an UPDATE', "update audit_events set outcome = 'failed', reason = 'TAMPERED'"],
    ['a DELETE', 'delete from audit_events'],
    ['a TRUNCATE', 'truncate audit_events'],
  ] as const;

  it.each(TAMPERING)("refuses %s from the service's own role by privilege", async (_label, sql) => {
    const owner = await withEvents();
    const before = await auditOf(owner.organizationId);
    expect(before.length).toBeGreaterThan(0);
    await connectedAs(t.databaseUrl, async (db) => {
      await expect(db.query(sql)).rejects.toMatchObject({ code: '42501', message: 'permission denied for table audit_events' });
    });
    expect(await auditOf(owner.organizationId)).toEqual(before);
  });

  it("refuses the service's own role the switch that skips triggers", async () => {
    await connectedAs(t.databaseUrl, async (db) => {
      await expect(db.query('set session_replication_role = replica')).rejects.toMatchObject({
        code: '42501',
        message: 'permission denied to set parameter "session_replication_role"',
      });
      await expect(db.query('alter table audit_events disable trigger audit_events_no_update_or_delete')).rejects.toMatchObject({ code: '42501' });
    });
  });

  it.each(TAMPERING)('refuses %s from the owner role by trigger', async (_label, sql) => {
    const owner = await withEvents();
    const before = await auditOf(owner.organizationId);
    await connectedAs(t.ownerDatabaseUrl!, async (db) => {
      await expect(db.query(sql)).rejects.toMatchObject({ code: '42501', message: 'audit_events is append-only' });
    });
    expect(await auditOf(owner.organizationId)).toEqual(before);
  });
});
