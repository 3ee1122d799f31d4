import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { DeliveryRecords, GLOBAL_SCOPE, INTERRUPTED_ATTEMPT, type ClaimOptions, type DeliveryRef } from '../../src/delivery';
import { IN_FLIGHT_BOUND_MS, MAX_ATTEMPTS, RETRY_INTERVAL_MS } from '../../workflows/policy';
import { createTestDatabase } from '../support/databases';
import {
  endpoint,
  organization,
  recordDelivery,
  storedAttempts,
  storedDeadLetters,
  storedDelivery,
} from '../support/deliveries';

/**
 * Every transition of DeliveryRecords against real PostgreSQL, on a clock the test moves:
 * what each method returns, and what it leaves in the rows.
 */
let orm: MikroORM;
let databaseUrl: string;
let drop: () => Promise<void>;
const T0 = Date.parse('2026-11-21T12:00:00Z');
let clock = T0;
const records = new DeliveryRecords({ now: () => clock });
const em = () => orm.em.fork();

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  databaseUrl = database.url;
  orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 6 } });
});
afterAll(async () => {
  await orm.close();
  await drop();
});
beforeEach(() => {
  clock = T0;
});

/** A fresh organization with one endpoint and one recorded delivery. */
async function fresh(options: { disabled?: boolean } = {}): Promise<{ ref: DeliveryRef; organizationId: string; endpointId: string }> {
  const organizationId = await organization(orm);
  const { id: endpointId } = await endpoint(orm, organizationId, options);
  const ref = await recordDelivery(orm, records, organizationId, endpointId);
  return { ref, organizationId, endpointId };
}

/** Marks one attempt dispatched: what the engines' group commit writes for a batch of one. */
async function markDispatched(ref: DeliveryRef, attempt: number, startedAt: Date): Promise<boolean> {
  const [marked] = await records.markAllDispatched(em(), [{ ref, attempt, startedAt }]);
  return marked!;
}

/** Records one attempt's outcome: what the engines' group commit writes for a batch of one. */
async function recordOutcome(ref: DeliveryRef, attempt: number, startedAt: Date, outcome: { status: number | null; error: string | null }) {
  const [recorded] = await records.recordOutcomes(em(), [{ ref, attempt, startedAt, ...outcome }]);
  return recorded!;
}

/** Begins and dispatches the next attempt; fails the test if the records would not send. */
async function dispatched(ref: DeliveryRef): Promise<{ attempt: number; startedAt: Date }> {
  const start = await records.beginAttempt(em(), ref);
  if (start.kind !== 'send') throw new Error(`expected send, got ${JSON.stringify(start)}`);
  expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(true);
  return start;
}

/** Makes `n` failed attempts, one interval apart, as an engine would. */
async function failTimes(ref: DeliveryRef, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const { attempt, startedAt } = await dispatched(ref);
    await recordOutcome(ref, attempt, startedAt, { status: 500, error: 'The endpoint answered HTTP 500.' });
    clock += RETRY_INTERVAL_MS;
  }
}

async function withKillSwitch<T>(scope: string, body: () => Promise<T>): Promise<T> {
  await records.writeKillSwitch(em(), scope, true, 'drill');
  try {
    return await body();
  } finally {
    await records.writeKillSwitch(em(), scope, false, '');
  }
}

/** Resolves once a session of this test's database waits for a lock another one holds. */
async function untilWaitingForLock(): Promise<void> {
  for (;;) {
    const [row] = await em().execute<{ waiting: boolean }[]>(
      'select exists (select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid where not l.granted and a.datname = current_database()) as waiting',
    );
    if (row!.waiting) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** What a claim took, as references (claimDue also begins their attempts: see its tests). */
async function claim(options: ClaimOptions): Promise<DeliveryRef[]> {
  return (await records.claimDue(em(), options)).map((c) => c.ref);
}

/** Claims return their rows in no particular order. */
const byId = (refs: DeliveryRef[]) => [...refs].sort((a, b) => a.deliveryId.localeCompare(b.deliveryId));

/** Claims see every due row of the database: earlier tests' rows are taken out of the way. */
async function nothingElseDue(): Promise<void> {
  await em().execute('update webhook_deliveries set next_attempt_at = null');
}

describe('record', () => {
  it('records a pending delivery, due now, with no attempt', async () => {
    const organizationId = await organization(orm);
    const { id: endpointId } = await endpoint(orm, organizationId);
    const [listed] = await records.record(em(), [
      { organizationId, endpointId, eventId: 'evt_1', eventType: 'webhook.test', payload: '{"id":"evt_1"}', workflowId: 'wf-1' },
    ]);
    expect(listed).toMatchObject({ endpointId, eventId: 'evt_1', eventType: 'webhook.test', status: 'pending', attemptCount: 0, nextAttemptAtMs: T0, workflowId: 'wf-1' });
    expect(await storedDelivery(orm, listed!.id)).toMatchObject({ status: 'pending', attempt_count: 0, next_attempt_at: T0, last_error: null });
    const [payload] = await em().execute<{ payload: string }[]>('select payload from webhook_deliveries where id = ?', [listed!.id]);
    expect(payload!.payload).toBe('{"id":"evt_1"}');
  });

  it('is idempotent on endpoint and event: the second call returns the existing delivery untouched', async () => {
    const organizationId = await organization(orm);
    const { id: endpointId } = await endpoint(orm, organizationId);
    const delivery = { organizationId, endpointId, eventId: 'evt_once', eventType: 'webhook.test', workflowId: 'wf' };
    const [first] = await records.record(em(), [{ ...delivery, payload: '{"n":1}' }]);
    clock += 1000;
    const [second] = await records.record(em(), [{ ...delivery, payload: '{"n":2}' }]);
    expect(second!.id).toBe(first!.id);
    expect(second!.createdAtMs).toBe(T0);
    const rows = await em().execute<{ payload: string }[]>('select payload from webhook_deliveries where endpoint_id = ?', [endpointId]);
    expect(rows).toEqual([{ payload: '{"n":1}' }]);
  });
});

describe('listRecent', () => {
  it('lists the five newest deliveries of each given endpoint, newest first, and no other endpoint', async () => {
    const organizationId = await organization(orm);
    const [a, b, quiet, other] = await Promise.all([1, 2, 3, 4].map(() => endpoint(orm, organizationId)));
    const made: Record<string, string[]> = { a: [], b: [], other: [] };
    for (let i = 0; i < 7; i++) {
      clock += 1000;
      made.a!.push((await recordDelivery(orm, records, organizationId, a!.id)).deliveryId);
      if (i < 2) made.b!.push((await recordDelivery(orm, records, organizationId, b!.id)).deliveryId);
      made.other!.push((await recordDelivery(orm, records, organizationId, other!.id)).deliveryId);
    }
    const recent = await records.listRecent(em(), [a!.id, b!.id, quiet!.id]);
    expect([...recent.keys()].sort()).toEqual([a!.id, b!.id, quiet!.id].sort());
    expect(recent.get(a!.id)!.map((d) => d.id)).toEqual(made.a!.slice(2).reverse());
    expect(recent.get(b!.id)!.map((d) => d.id)).toEqual(made.b!.slice().reverse());
    expect(recent.get(quiet!.id)).toEqual([]);
    expect(await records.listRecent(em(), [])).toEqual(new Map());
  });
});

describe('claimDue', () => {
  beforeEach(nothingElseDue);

  it('leases due open deliveries only, to their owner', async () => {
    const { ref: due } = await fresh();
    const { ref: failed } = await fresh();
    await records.fail(em(), failed, 'The endpoint is disabled.');
    clock += 1000;
    const { ref: later } = await fresh();
    clock += 10_000;
    const { ref: notYet } = await fresh();
    clock = T0 + 5000;

    const claimed = await claim({ owner: 'instance-a', limit: 10, leaseMs: 15_000, busy: [] });
    expect(byId(claimed)).toEqual(byId([due, later]));
    for (const ref of [due, later]) {
      expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: 'instance-a', lease_until: T0 + 5000 + 15_000 });
    }
    for (const ref of [notYet, failed]) expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: null, lease_until: null });
  });

  it('takes no more than the limit, the longest due first', async () => {
    const refs = [];
    for (let i = 0; i < 3; i++) {
      refs.push((await fresh()).ref);
      clock += 1;
    }
    expect(byId(await claim({ owner: 'a', limit: 2, leaseMs: 15_000, busy: [] }))).toEqual(byId(refs.slice(0, 2)));
    expect(await claim({ owner: 'a', limit: 0, leaseMs: 15_000, busy: [] })).toEqual([]);
  });

  it('leaves a leased delivery to its owner until the lease lapses', async () => {
    const { ref } = await fresh();
    expect(await claim({ owner: 'a', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([ref]);
    clock += 14_999;
    expect(await claim({ owner: 'b', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([]);
    clock += 2;
    expect(await claim({ owner: 'b', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([ref]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: 'b' });
  });

  it('skips the deliveries its caller is already working on', async () => {
    const { ref: busy } = await fresh();
    const { ref: free } = await fresh();
    expect(await claim({ owner: 'a', limit: 10, leaseMs: 15_000, busy: [busy.deliveryId] })).toEqual([free]);
    expect(await storedDelivery(orm, busy.deliveryId)).toMatchObject({ lease_owner: null });
  });

  it('skips a row another transaction has locked instead of waiting for it (FOR UPDATE SKIP LOCKED)', async () => {
    const { ref: locked } = await fresh();
    const { ref: free } = await fresh();
    const other = new Client({ connectionString: databaseUrl });
    await other.connect();
    try {
      await other.query('begin');
      await other.query('select id from webhook_deliveries where id = $1 for update', [locked.deliveryId]);
      // Without SKIP LOCKED this claim would wait for the lock, past the test's timeout.
      expect(await claim({ owner: 'a', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([free]);
      await other.query('rollback');
    } finally {
      await other.end();
    }
    expect(await claim({ owner: 'b', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([locked]);
  });

  it('begins the attempt of each delivery it claims, as beginAttempt would', async () => {
    const { ref, endpointId } = await fresh();
    const [claimed] = await records.claimDue(em(), { owner: 'a', limit: 10, leaseMs: 15_000, busy: [] });
    expect(claimed).toEqual({ ref, start: expect.objectContaining({ kind: 'send', attempt: 1, startedAt: new Date(T0), url: 'https://hooks.example.com/in', endpointId }) });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([{ attempt: 1, started_at: T0, dispatched_at: null, finished_at: null, response_status: null, error: null }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'pending', attempt_count: 0, lease_owner: 'a' });
  });

  it('fails a delivery to a disabled endpoint and holds a switched-off one in the claim, leaving neither leased', async () => {
    const { ref: gone } = await fresh({ disabled: true });
    const { ref: held, organizationId } = await fresh();
    await withKillSwitch(organizationId, async () => {
      const claimed = await records.claimDue(em(), { owner: 'a', limit: 10, leaseMs: 15_000, busy: [] });
      expect(claimed).toEqual(
        expect.arrayContaining([
          { ref: gone, start: { kind: 'gone', reason: 'The endpoint is disabled.' } },
          { ref: held, start: { kind: 'held', sent: 0 } },
        ]),
      );
      expect(await storedDelivery(orm, held.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + RETRY_INTERVAL_MS, lease_owner: null });
    });
    expect(await storedDelivery(orm, gone.deliveryId)).toMatchObject({ status: 'failed', last_error: 'The endpoint is disabled.', lease_owner: null });
    expect(await storedAttempts(orm, held.deliveryId)).toEqual([]);
  });

  it('leases but leaves to beginAttempt a delivery whose dispatched attempt never finished', async () => {
    const { ref } = await fresh();
    await dispatched(ref);
    await em().execute('update webhook_deliveries set next_attempt_at = ? where id = ?', [new Date(T0), ref.deliveryId]);
    expect(await records.claimDue(em(), { owner: 'a', limit: 10, leaseMs: 15_000, busy: [] })).toEqual([{ ref, start: null }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: 'a' });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, dispatched_at: T0, finished_at: null })]);
  });

  it('never gives one delivery to two concurrent claims', async () => {
    const refs = [];
    for (let i = 0; i < 30; i++) refs.push((await fresh()).ref);
    const claims = await Promise.all(
      ['a', 'b', 'c'].map((owner) => claim({ owner, limit: 30, leaseMs: 15_000, busy: [] })),
    );
    const ids = claims.flat().map((r) => r.deliveryId);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.sort()).toEqual(refs.map((r) => r.deliveryId).sort());
    const owners = await em().execute<{ lease_owner: string; n: number }[]>(
      'select lease_owner, count(*)::int as n from webhook_deliveries where id in (?) group by lease_owner order by lease_owner',
      [ids],
    );
    expect(owners).toEqual(['a', 'b', 'c'].map((o, i) => ({ lease_owner: o, n: claims[i]!.length })).filter((o) => o.n > 0));
  });
});

describe('renewLease', () => {
  beforeEach(nothingElseDue);

  it('renews for the owner only, and no more once the lease was given back', async () => {
    const { ref } = await fresh();
    await claim({ owner: 'a', limit: 10, leaseMs: 15_000, busy: [] });
    clock += 10_000;
    expect(await records.renewLease(em(), ref.deliveryId, 'b', 15_000)).toBe(false);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: 'a', lease_until: T0 + 15_000 });
    expect(await records.renewLease(em(), ref.deliveryId, 'a', 15_000)).toBe(true);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: 'a', lease_until: T0 + 25_000 });

    // Holding the delivery gives its lease back.
    await records.hold(em(), ref);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ lease_owner: null, lease_until: null });
    expect(await records.renewLease(em(), ref.deliveryId, 'a', 15_000)).toBe(false);
  });
});

describe('beginAttempt', () => {
  it('starts attempt 1 with what to send, without counting it yet', async () => {
    const { ref, endpointId } = await fresh();
    const start = await records.beginAttempt(em(), ref);
    expect(start).toMatchObject({ kind: 'send', attempt: 1, url: 'https://hooks.example.com/in', endpointId, secretKeyId: 'k' });
    if (start.kind !== 'send') return;
    expect(start.startedAt.getTime()).toBe(T0);
    expect(JSON.parse(start.payload)).toMatchObject({ id: ref.eventId });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([{ attempt: 1, started_at: T0, dispatched_at: null, finished_at: null, response_status: null, error: null }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'pending', attempt_count: 0 });
  });

  it('takes over an attempt that was begun but never dispatched, under the same number', async () => {
    const { ref } = await fresh();
    const first = await records.beginAttempt(em(), ref);
    clock += 20_000;
    const second = await records.beginAttempt(em(), ref);
    expect(second).toMatchObject({ kind: 'send', attempt: 1 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, started_at: T0 + 20_000, dispatched_at: null })]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ attempt_count: 0 });
    if (first.kind !== 'send') throw new Error('first attempt not sendable');
    // The executor it was taken from may no longer send.
    expect(await markDispatched(ref, 1, first.startedAt)).toBe(false);
  });

  it('closes a dispatched attempt that never finished as interrupted, counts it, and waits out its interval', async () => {
    const { ref } = await fresh();
    await dispatched(ref);
    clock += 5000;
    const start = await records.beginAttempt(em(), ref);
    expect(start).toEqual({ kind: 'wait', until: new Date(T0 + RETRY_INTERVAL_MS), sent: 1 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([
      { attempt: 1, started_at: T0, dispatched_at: T0, finished_at: T0 + 5000, response_status: null, error: INTERRUPTED_ATTEMPT },
    ]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({
      status: 'retrying',
      attempt_count: 1,
      last_error: INTERRUPTED_ATTEMPT,
      next_attempt_at: T0 + RETRY_INTERVAL_MS,
      lease_owner: null,
      lease_until: null,
    });
    clock = T0 + RETRY_INTERVAL_MS;
    expect(await records.beginAttempt(em(), ref)).toMatchObject({ kind: 'send', attempt: 2 });
  });

  it('sends the next attempt at once when the interrupted one was dispatched more than an interval ago', async () => {
    const { ref } = await fresh();
    await dispatched(ref);
    clock += RETRY_INTERVAL_MS + 1;
    expect(await records.beginAttempt(em(), ref)).toMatchObject({ kind: 'send', attempt: 2 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([
      expect.objectContaining({ attempt: 1, finished_at: clock, error: INTERRUPTED_ATTEMPT }),
      expect.objectContaining({ attempt: 2, started_at: clock, dispatched_at: null, finished_at: null }),
    ]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'retrying', attempt_count: 1, next_attempt_at: clock });
  });

  it('answers turn on a takeover while the endpoint has all its turns in flight: the interrupted attempt is closed and counted, no next one begun', async () => {
    const { ref, organizationId, endpointId } = await fresh();
    await dispatched(ref);
    // Long enough for its interval to have run and for the interrupted attempt no longer to hold a turn.
    clock += IN_FLIGHT_BOUND_MS + RETRY_INTERVAL_MS;
    for (let i = 0; i < records.endpointConcurrency; i++) {
      const other = await recordDelivery(orm, records, organizationId, endpointId);
      expect(await records.beginAttempt(em(), other)).toMatchObject({ kind: 'send', attempt: 1 });
    }
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'turn', sent: 1 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, finished_at: clock, error: INTERRUPTED_ATTEMPT })]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'retrying', attempt_count: 1, next_attempt_at: clock });
  });

  it('sees an attempt dispatched while it waited for the row: closes it as interrupted instead of sending the next', async () => {
    const { ref } = await fresh();
    const first = await records.beginAttempt(em(), ref);
    if (first.kind !== 'send') throw new Error('not sendable');
    const other = new Client({ connectionString: databaseUrl });
    await other.connect();
    try {
      // Another executor marks attempt 1 dispatched and holds the row until it commits.
      await other.query('begin');
      await other.query('update webhook_deliveries set attempt_count = 1 where id = $1', [ref.deliveryId]);
      await other.query('update delivery_attempts set dispatched_at = $2 where delivery_id = $1 and attempt = 1', [ref.deliveryId, new Date(T0)]);
      clock += 5000;
      const begun = records.beginAttempt(em(), ref);
      await untilWaitingForLock();
      await other.query('commit');
      expect(await begun).toEqual({ kind: 'wait', until: new Date(T0 + RETRY_INTERVAL_MS), sent: 1 });
    } finally {
      await other.end();
    }
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, dispatched_at: T0, finished_at: T0 + 5000, error: INTERRUPTED_ATTEMPT })]);
  });

  it('holds the delivery without using an attempt while its organization is switched off', async () => {
    const { ref, organizationId } = await fresh();
    await withKillSwitch(organizationId, async () => {
      expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'held', sent: 0 });
      expect(await storedAttempts(orm, ref.deliveryId)).toEqual([]);
      expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'held', attempt_count: 0, next_attempt_at: T0 + RETRY_INTERVAL_MS });
    });
  });

  it('holds every organization while the global switch is on', async () => {
    const { ref } = await fresh();
    await withKillSwitch(GLOBAL_SCOPE, async () => {
      expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'held', sent: 0 });
    });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'held', attempt_count: 0 });
  });

  it('fails the delivery with its reason when the endpoint is disabled', async () => {
    const { ref } = await fresh({ disabled: true });
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'gone', reason: 'The endpoint is disabled.' });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'failed', last_error: 'The endpoint is disabled.', next_attempt_at: null, attempt_count: 0 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([]);
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'gone', reason: 'The delivery already failed.' });
  });

  it('fails the delivery when its endpoint is not its organization’s (missing to it)', async () => {
    const organizationId = await organization(orm);
    const { id: foreignEndpoint } = await endpoint(orm, await organization(orm, 'Other'));
    const ref = await recordDelivery(orm, records, organizationId, foreignEndpoint);
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'gone', reason: 'The endpoint no longer exists.' });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'failed', last_error: 'The endpoint no longer exists.' });
  });

  it('answers gone for a delivery that does not exist', async () => {
    const { ref } = await fresh();
    expect(await records.beginAttempt(em(), { ...ref, deliveryId: randomUUID() })).toEqual({ kind: 'gone', reason: 'The delivery record no longer exists.' });
  });

  it(`is exhausted after ${MAX_ATTEMPTS} counted attempts, and makes no ninth`, async () => {
    const { ref } = await fresh();
    await failTimes(ref, MAX_ATTEMPTS);
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'exhausted', sent: MAX_ATTEMPTS });
    expect((await storedAttempts(orm, ref.deliveryId)).map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await records.deadLetter(em(), ref);
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'exhausted', sent: MAX_ATTEMPTS });
  });

  it('leaves a delivered delivery delivered', async () => {
    const { ref } = await fresh();
    const { attempt, startedAt } = await dispatched(ref);
    await recordOutcome(ref, attempt, startedAt, { status: 204, error: null });
    clock += RETRY_INTERVAL_MS;
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'delivered', attempt: 1, status: 204 });
    expect(await storedAttempts(orm, ref.deliveryId)).toHaveLength(1);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'delivered', attempt_count: 1 });
  });
});

describe('markAllDispatched, one attempt', () => {
  it('counts the attempt', async () => {
    const { ref } = await fresh();
    const start = await records.beginAttempt(em(), ref);
    if (start.kind !== 'send') throw new Error('not sendable');
    clock += 40;
    expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(true);
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, started_at: T0, dispatched_at: T0 + 40, finished_at: null })]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ attempt_count: 1 });
    // Once only.
    expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(false);
  });

  it('refuses once a kill switch came on after the attempt began', async () => {
    const { ref, organizationId } = await fresh();
    const start = await records.beginAttempt(em(), ref);
    if (start.kind !== 'send') throw new Error('not sendable');
    await withKillSwitch(organizationId, async () => {
      expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(false);
    });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ dispatched_at: null })]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ attempt_count: 0 });
  });

  it('refuses once the delivery finished', async () => {
    const { ref } = await fresh();
    const start = await records.beginAttempt(em(), ref);
    if (start.kind !== 'send') throw new Error('not sendable');
    await records.fail(em(), ref, 'The endpoint is disabled.');
    expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(false);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'failed', attempt_count: 0 });
  });

  it("refuses an executor whose attempt another executor's startedAt took over", async () => {
    const { ref } = await fresh();
    const mine = await records.beginAttempt(em(), ref);
    clock += 1;
    const theirs = await records.beginAttempt(em(), ref);
    if (mine.kind !== 'send' || theirs.kind !== 'send') throw new Error('not sendable');
    expect(await markDispatched(ref, 1, mine.startedAt)).toBe(false);
    expect(await markDispatched(ref, 1, theirs.startedAt)).toBe(true);
  });
});

describe('recordOutcomes, one attempt', () => {
  it('records a delivery', async () => {
    const { ref } = await fresh();
    await claim({ owner: 'a', limit: 100, leaseMs: 15_000, busy: [] });
    const { attempt, startedAt } = await dispatched(ref);
    clock += 120;
    expect(await recordOutcome(ref, attempt, startedAt, { status: 200, error: null })).toEqual({ kind: 'delivered', sent: 1 });
    expect(await storedDelivery(orm, ref.deliveryId)).toEqual({
      status: 'delivered',
      attempt_count: 1,
      last_error: null,
      last_response_status: 200,
      lease_owner: null,
      lease_until: null,
      next_attempt_at: null,
      delivered_at: T0 + 120,
    });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([{ attempt: 1, started_at: T0, dispatched_at: T0, finished_at: T0 + 120, response_status: 200, error: null }]);
  });

  it('records a failure as retrying, with the next attempt exactly one interval later', async () => {
    const { ref } = await fresh();
    const { attempt, startedAt } = await dispatched(ref);
    clock += 300;
    expect(await recordOutcome(ref, attempt, startedAt, { status: 503, error: 'The endpoint answered HTTP 503.' })).toEqual({
      kind: 'retrying',
      sent: 1,
      exhausted: false,
    });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({
      status: 'retrying',
      attempt_count: 1,
      last_error: 'The endpoint answered HTTP 503.',
      last_response_status: 503,
      next_attempt_at: T0 + 300 + RETRY_INTERVAL_MS,
    });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ finished_at: T0 + 300, response_status: 503, error: 'The endpoint answered HTTP 503.' })]);
  });

  it(`dead-letters the delivery with its ${MAX_ATTEMPTS}th failure, in the same statement: it never reads retrying with no attempt left`, async () => {
    const { ref } = await fresh();
    await failTimes(ref, MAX_ATTEMPTS - 1);
    const { attempt, startedAt } = await dispatched(ref);
    expect(attempt).toBe(MAX_ATTEMPTS);
    expect(await recordOutcome(ref, attempt, startedAt, { status: null, error: 'The endpoint refused the connection.' })).toEqual({
      kind: 'retrying',
      sent: MAX_ATTEMPTS,
      exhausted: true,
    });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'dead_lettered', attempt_count: MAX_ATTEMPTS, next_attempt_at: null, last_response_status: null });
    expect(await storedDeadLetters(orm, ref.deliveryId)).toEqual([expect.objectContaining({ last_error: 'The endpoint refused the connection.' })]);
    // The dead-letter step that follows (the workflow's activity, the embedded engine's call) finds it done.
    expect(await records.deadLetter(em(), ref)).toBe(false);
    expect(await storedDeadLetters(orm, ref.deliveryId)).toHaveLength(1);
  });

  it('writes nothing when another executor closed the attempt and sent a later one', async () => {
    const { ref } = await fresh();
    const slow = await dispatched(ref);
    // The slow executor was taken for dead: another one closes attempt 1 and sends attempt 2.
    clock += RETRY_INTERVAL_MS + 1;
    const next = await dispatched(ref);
    expect(next.attempt).toBe(2);
    const attemptsBefore = await storedAttempts(orm, ref.deliveryId);
    const deliveryBefore = await storedDelivery(orm, ref.deliveryId);
    clock += 50;
    expect(await recordOutcome(ref, slow.attempt, slow.startedAt, { status: 200, error: null })).toEqual({ kind: 'superseded' });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual(attemptsBefore);
    expect(await storedDelivery(orm, ref.deliveryId)).toEqual(deliveryBefore);
  });

  it('replaces an "interrupted" close with the real outcome when no later attempt was sent', async () => {
    const { ref } = await fresh();
    const slow = await dispatched(ref);
    clock += 5000;
    expect(await records.beginAttempt(em(), ref)).toMatchObject({ kind: 'wait', sent: 1 });
    clock += 100;
    expect(await recordOutcome(ref, slow.attempt, slow.startedAt, { status: 200, error: null })).toEqual({ kind: 'delivered', sent: 1 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([{ attempt: 1, started_at: T0, dispatched_at: T0, finished_at: T0 + 5100, response_status: 200, error: null }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'delivered', attempt_count: 1, last_error: null, next_attempt_at: null });
  });

  it('does not record the same attempt twice', async () => {
    const { ref } = await fresh();
    const { attempt, startedAt } = await dispatched(ref);
    await recordOutcome(ref, attempt, startedAt, { status: 500, error: 'The endpoint answered HTTP 500.' });
    clock += 10;
    expect(await recordOutcome(ref, attempt, startedAt, { status: 200, error: null })).toEqual({ kind: 'superseded' });
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'retrying', last_response_status: 500 });
  });
});

describe('markAllDispatched and recordOutcomes (several deliveries in one statement)', () => {
  it('counts each attempt that may go, refuses the one whose delivery finished, and answers in order', async () => {
    const [a, b, c] = [(await fresh()).ref, (await fresh()).ref, (await fresh()).ref];
    const starts = [];
    for (const ref of [a!, b!, c!]) {
      const start = await records.beginAttempt(em(), ref);
      if (start.kind !== 'send') throw new Error('not sendable');
      starts.push({ ref, attempt: start.attempt, startedAt: start.startedAt });
    }
    await records.fail(em(), b!, 'The endpoint is disabled.');
    clock += 7;
    expect(await records.markAllDispatched(em(), starts)).toEqual([true, false, true]);
    expect(await storedAttempts(orm, a!.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, dispatched_at: T0 + 7 })]);
    expect(await storedAttempts(orm, b!.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, dispatched_at: null })]);
    expect(await storedDelivery(orm, c!.deliveryId)).toMatchObject({ attempt_count: 1 });
    expect(await storedDelivery(orm, b!.deliveryId)).toMatchObject({ status: 'failed', attempt_count: 0 });
  });

  it('records each outcome, delivered or retrying, and supersedes an attempt already closed', async () => {
    const [a, b, c] = [(await fresh()).ref, (await fresh()).ref, (await fresh()).ref];
    const sent = await Promise.all([a!, b!, c!].map(async (ref) => ({ ref, ...(await dispatched(ref)) })));
    await recordOutcome(c!, sent[2]!.attempt, sent[2]!.startedAt, { status: 500, error: 'The endpoint answered HTTP 500.' });
    clock += 40;
    expect(
      await records.recordOutcomes(em(), [
        { ...sent[0]!, status: 200, error: null },
        { ...sent[1]!, status: 503, error: 'The endpoint answered HTTP 503.' },
        { ...sent[2]!, status: 200, error: null },
      ]),
    ).toEqual([{ kind: 'delivered', sent: 1 }, { kind: 'retrying', sent: 1, exhausted: false }, { kind: 'superseded' }]);
    expect(await storedDelivery(orm, a!.deliveryId)).toMatchObject({ status: 'delivered', attempt_count: 1, delivered_at: T0 + 40, last_response_status: 200, next_attempt_at: null });
    expect(await storedDelivery(orm, b!.deliveryId)).toMatchObject({
      status: 'retrying',
      delivered_at: null,
      last_error: 'The endpoint answered HTTP 503.',
      last_response_status: 503,
      next_attempt_at: T0 + 40 + RETRY_INTERVAL_MS,
    });
    expect(await storedDelivery(orm, c!.deliveryId)).toMatchObject({ status: 'retrying', last_response_status: 500 });
  });
});

describe('hold and fail', () => {
  it('hold: held for one interval, lease given back, no attempt used', async () => {
    const { ref } = await fresh();
    await claim({ owner: 'a', limit: 100, leaseMs: 15_000, busy: [] });
    await records.hold(em(), ref);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({
      status: 'held',
      attempt_count: 0,
      next_attempt_at: T0 + RETRY_INTERVAL_MS,
      lease_owner: null,
      lease_until: null,
    });
  });

  it('fail: failed with its reason, never due again; a finished delivery is left as it is', async () => {
    const { ref } = await fresh();
    await records.fail(em(), ref, 'The endpoint no longer exists.');
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'failed', last_error: 'The endpoint no longer exists.', next_attempt_at: null });

    const { ref: delivered } = await fresh();
    const { attempt, startedAt } = await dispatched(delivered);
    await recordOutcome(delivered, attempt, startedAt, { status: 200, error: null });
    await records.fail(em(), delivered, 'late');
    await records.hold(em(), delivered);
    expect(await storedDelivery(orm, delivered.deliveryId)).toMatchObject({ status: 'delivered', last_error: null });
  });
});

describe('deadLetter', () => {
  it('dead-letters once and queues one dead letter', async () => {
    const { ref, organizationId, endpointId } = await fresh();
    await failTimes(ref, 2);
    expect(await records.deadLetter(em(), ref)).toBe(true);
    expect(await records.deadLetter(em(), ref)).toBe(false);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'dead_lettered', attempt_count: 2, next_attempt_at: null });
    expect(await storedDeadLetters(orm, ref.deliveryId)).toEqual([{ organization_id: organizationId, endpoint_id: endpointId, last_error: 'The endpoint answered HTTP 500.' }]);
  });

  it('refuses a delivery that was delivered', async () => {
    const { ref } = await fresh();
    const { attempt, startedAt } = await dispatched(ref);
    await recordOutcome(ref, attempt, startedAt, { status: 200, error: null });
    expect(await records.deadLetter(em(), ref)).toBe(false);
    expect(await storedDeadLetters(orm, ref.deliveryId)).toEqual([]);
  });

  it("leaves a resend's series alone when the series before it asks late", async () => {
    const { ref, organizationId } = await fresh();
    const [row] = await em().execute<{ workflow_id: string }[]>('select workflow_id from webhook_deliveries where id = ?', [ref.deliveryId]);
    const first = row!.workflow_id;
    await failTimes(ref, MAX_ATTEMPTS);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'dead_lettered', attempt_count: MAX_ATTEMPTS });
    const resent = await records.resend(em(), { deliveryId: ref.deliveryId, organizationId });
    expect(resent).toMatchObject({ resent: { status: 'pending', series: 2 } });

    // Series 1's dead-letter activity, after the 8th failure's outcome had dead-lettered the row.
    expect(await records.deadLetter(em(), ref, { workflowId: first })).toBe(false);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'pending', attempt_count: 0 });
    expect(await storedDeadLetters(orm, ref.deliveryId)).toEqual([]);
    // Series 2's own does.
    expect(await records.deadLetter(em(), ref, { workflowId: `${first}/series-2` })).toBe(true);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'dead_lettered', attempt_count: 0 });
  });
});

describe('releaseHeld and the kill switches', () => {
  it('reads an untouched switch as off', async () => {
    expect(await records.readKillSwitch(em(), randomUUID())).toMatchObject({ enabled: false, reason: '', updatedAt: null });
  });

  it('writes and reads a switch; turning it off releases what it held in its organization only', async () => {
    const a = await fresh();
    const b = await fresh();
    const written = await records.writeKillSwitch(em(), a.organizationId, true, 'incident 7');
    expect(written).toEqual({ state: { scope: a.organizationId, enabled: true, reason: 'incident 7', updatedAt: new Date(T0) }, released: [] });
    expect(await records.readKillSwitch(em(), a.organizationId)).toEqual({ scope: a.organizationId, enabled: true, reason: 'incident 7', updatedAt: new Date(T0) });
    await records.hold(em(), a.ref);
    await records.hold(em(), b.ref);

    clock += 1000;
    const off = await records.writeKillSwitch(em(), a.organizationId, false, '');
    expect(off.released).toEqual([{ deliveryId: a.ref.deliveryId, workflowId: expect.stringContaining(a.ref.eventId) }]);
    expect(await records.readKillSwitch(em(), a.organizationId)).toMatchObject({ enabled: false, updatedAt: new Date(T0 + 1000) });
    expect(await storedDelivery(orm, a.ref.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + 1000 });
    expect(await storedDelivery(orm, b.ref.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + RETRY_INTERVAL_MS });
  });

  it('releaseHeld per organization and globally returns the released workflows', async () => {
    const a = await fresh();
    const b = await fresh();
    await records.hold(em(), a.ref);
    await records.hold(em(), b.ref);
    clock += 2000;
    expect(await records.releaseHeld(em(), b.organizationId)).toEqual([{ deliveryId: b.ref.deliveryId, workflowId: expect.stringContaining(b.ref.eventId) }]);
    expect(await storedDelivery(orm, a.ref.deliveryId)).toMatchObject({ next_attempt_at: T0 + RETRY_INTERVAL_MS });
    clock += 1000;
    const global = await records.releaseHeld(em(), GLOBAL_SCOPE);
    expect(global.map((r) => r.deliveryId)).toEqual(expect.arrayContaining([a.ref.deliveryId, b.ref.deliveryId]));
    expect(await storedDelivery(orm, a.ref.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + 3000 });
    expect(await storedDelivery(orm, b.ref.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + 3000 });
    const notHeld = await fresh();
    expect((await records.releaseHeld(em(), notHeld.organizationId))).toEqual([]);
  });
});

describe('lookup', () => {
  it('shows no next attempt while an attempt is under way, never the time it was due', async () => {
    const { ref } = await fresh();
    await failTimes(ref, 1);
    clock += 250;
    const { attempt, startedAt } = await dispatched(ref);
    expect(await records.lookup(em(), { deliveryId: ref.deliveryId })).toMatchObject({ status: 'retrying', attemptCount: 2, nextAttemptAtMs: null });
    await recordOutcome(ref, attempt, startedAt, { status: 500, error: 'The endpoint answered HTTP 500.' });
    expect(await records.lookup(em(), { deliveryId: ref.deliveryId })).toMatchObject({ nextAttemptAtMs: clock + RETRY_INTERVAL_MS });
  });

  it('finds a delivery by id and by endpoint and event, with every attempt', async () => {
    const { ref, organizationId, endpointId } = await fresh();
    const first = await dispatched(ref);
    clock += 250;
    await recordOutcome(ref, first.attempt, first.startedAt, { status: 500, error: 'The endpoint answered HTTP 500.' });
    clock = T0 + 250 + RETRY_INTERVAL_MS;
    const second = await dispatched(ref);
    clock += 80;
    await recordOutcome(ref, second.attempt, second.startedAt, { status: 200, error: null });

    const byId = await records.lookup(em(), { deliveryId: ref.deliveryId });
    expect(byId).toMatchObject({
      id: ref.deliveryId,
      organizationId,
      endpointId,
      eventId: ref.eventId,
      status: 'delivered',
      attemptCount: 2,
      deadLetteredAt: null,
      attempts: [
        { attempt: 1, startedAt: new Date(T0), dispatchedAt: new Date(T0), finishedAt: new Date(T0 + 250), responseStatus: 500, error: 'The endpoint answered HTTP 500.' },
        { attempt: 2, startedAt: new Date(second.startedAt), dispatchedAt: second.startedAt, finishedAt: new Date(clock), responseStatus: 200, error: null },
      ],
    });
    expect(await records.lookup(em(), { endpointId, eventId: ref.eventId })).toEqual(byId);
    expect(await records.lookup(em(), { deliveryId: randomUUID() })).toBeNull();
    expect(await records.lookup(em(), { endpointId, eventId: 'evt_unknown' })).toBeNull();
  });

  it('says when a delivery was dead-lettered', async () => {
    const { ref } = await fresh();
    await failTimes(ref, MAX_ATTEMPTS);
    await records.deadLetter(em(), ref);
    const view = await records.lookup(em(), { deliveryId: ref.deliveryId });
    // With the last failure's outcome, one interval before the clock failTimes moved on.
    expect(view).toMatchObject({ status: 'dead_lettered', attemptCount: MAX_ATTEMPTS, deadLetteredAt: new Date(clock - RETRY_INTERVAL_MS) });
    expect(view!.attempts).toHaveLength(MAX_ATTEMPTS);
  });
});

describe('listDeadLetters', () => {
  it('lists newest first, filters by organization, endpoint and time, and pages by keyset', async () => {
    const organizationId = await organization(orm);
    const [e1, e2] = await Promise.all([endpoint(orm, organizationId), endpoint(orm, organizationId)]);
    const letters: { deliveryId: string; at: number }[] = [];
    for (const [i, e] of [e1, e1, e2, e1].entries()) {
      clock = T0 + i * 60_000;
      const ref = await recordDelivery(orm, records, organizationId, e!.id);
      await failTimes(ref, MAX_ATTEMPTS);
      await records.deadLetter(em(), ref);
      letters.push({ deliveryId: ref.deliveryId, at: clock - RETRY_INTERVAL_MS });
    }
    const other = await fresh();
    await failTimes(other.ref, MAX_ATTEMPTS);
    await records.deadLetter(em(), other.ref);

    const all = await records.listDeadLetters(em(), { organizationId, limit: 10 });
    expect(all.map((l) => l.deliveryId)).toEqual(letters.map((l) => l.deliveryId).reverse());
    expect(all[0]).toMatchObject({ organizationId, endpointId: e1!.id, eventType: 'webhook.test', attemptCount: MAX_ATTEMPTS, lastError: 'The endpoint answered HTTP 500.', deadLetteredAt: new Date(letters[3]!.at) });

    expect((await records.listDeadLetters(em(), { endpointId: e2!.id, limit: 10 })).map((l) => l.deliveryId)).toEqual([letters[2]!.deliveryId]);
    const window = await records.listDeadLetters(em(), { organizationId, since: new Date(letters[1]!.at), until: new Date(letters[3]!.at), limit: 10 });
    expect(window.map((l) => l.deliveryId)).toEqual([letters[2]!.deliveryId, letters[1]!.deliveryId]);

    const page1 = await records.listDeadLetters(em(), { organizationId, limit: 2 });
    const last = page1.at(-1)!;
    const page2 = await records.listDeadLetters(em(), { organizationId, limit: 2, before: { at: last.deadLetteredAt, deliveryId: last.deliveryId } });
    expect([...page1, ...page2].map((l) => l.deliveryId)).toEqual(all.map((l) => l.deliveryId));
  });
});

describe('a paused endpoint', () => {
  /** Pauses (or resumes) an endpoint as the webhook service does: its paused_at. */
  async function setPaused(endpointId: string, paused: boolean): Promise<void> {
    await em().execute('update webhook_endpoints set paused_at = ? where id = ?', [paused ? new Date(clock) : null, endpointId]);
  }

  it('holds its delivery without using an attempt, and only its own: another endpoint of the organization sends', async () => {
    const { ref, organizationId, endpointId } = await fresh();
    const { id: other } = await endpoint(orm, organizationId);
    const sibling = await recordDelivery(orm, records, organizationId, other);
    await setPaused(endpointId, true);
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'held', sent: 0 });
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'held', attempt_count: 0, next_attempt_at: T0 + RETRY_INTERVAL_MS });
    expect(await records.beginAttempt(em(), sibling)).toMatchObject({ kind: 'send', attempt: 1 });
  });

  it('holds its delivery in the claim, leaving it unleased', async () => {
    const { ref, endpointId } = await fresh();
    await setPaused(endpointId, true);
    const claimed = await records.claimDue(em(), { owner: 'a', limit: 100, leaseMs: 15_000, busy: [] });
    expect(claimed.filter((c) => c.ref.deliveryId === ref.deliveryId)).toEqual([{ ref, start: { kind: 'held', sent: 0 } }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'held', lease_owner: null });
  });

  it('refuses the dispatch of an attempt begun before the pause: nothing is sent, nothing counted', async () => {
    const { ref, endpointId } = await fresh();
    const start = await records.beginAttempt(em(), ref);
    if (start.kind !== 'send') throw new Error('not sendable');
    await setPaused(endpointId, true);
    expect(await markDispatched(ref, start.attempt, start.startedAt)).toBe(false);
    expect(await storedAttempts(orm, ref.deliveryId)).toEqual([expect.objectContaining({ dispatched_at: null })]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ attempt_count: 0 });
  });

  it('keeps the attempts a delivery made before the pause, and sends the next after the resume', async () => {
    const { ref, endpointId } = await fresh();
    await failTimes(ref, 2);
    await setPaused(endpointId, true);
    clock += RETRY_INTERVAL_MS;
    expect(await records.beginAttempt(em(), ref)).toEqual({ kind: 'held', sent: 2 });
    await setPaused(endpointId, false);
    clock += 500;
    expect(await records.releaseHeldOfEndpoint(em(), ref.organizationId, endpointId)).toEqual([{ deliveryId: ref.deliveryId, workflowId: expect.stringContaining(ref.eventId) }]);
    expect(await storedDelivery(orm, ref.deliveryId)).toMatchObject({ status: 'held', attempt_count: 2, next_attempt_at: clock });
    expect(await records.beginAttempt(em(), ref)).toMatchObject({ kind: 'send', attempt: 3 });
  });

  it("releaseHeldOfEndpoint releases that endpoint's held deliveries only, and only in its organization", async () => {
    const a = await fresh();
    const { id: other } = await endpoint(orm, a.organizationId);
    const sibling = await recordDelivery(orm, records, a.organizationId, other);
    await records.hold(em(), a.ref);
    await records.hold(em(), sibling);
    clock += 1000;
    expect(await records.releaseHeldOfEndpoint(em(), randomUUID(), a.endpointId)).toEqual([]);
    expect((await records.releaseHeldOfEndpoint(em(), a.organizationId, a.endpointId)).map((r) => r.deliveryId)).toEqual([a.ref.deliveryId]);
    expect(await storedDelivery(orm, a.ref.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + 1000 });
    expect(await storedDelivery(orm, sibling.deliveryId)).toMatchObject({ status: 'held', next_attempt_at: T0 + RETRY_INTERVAL_MS });
  });
});
