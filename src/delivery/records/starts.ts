import { sql, type Kysely, type QueryCreator } from 'kysely';
import { CompiledStatement, epochMs, type DeliveryStatus, type EntityManager, type SignatureScheme } from '../../db';
import { IN_FLIGHT_BOUND_MS, MAX_ATTEMPTS } from '../../../workflows/policy';
import type { DeliveryRef } from '../contract';
import { failedColumns, heldColumns } from './outcomes';
import { db, INTERRUPTED_ATTEMPT, OPEN_STATUSES, stoppedBy, type RecordsContext, type Schedule, type Tables } from './rows';

/**
 * How an attempt starts: the embedded engine's claim of due deliveries (claimDue, with its
 * lease and renewLease), and beginAttempt, which decides under the row's lock what the
 * attempt may do and writes it. Both run one statement (beginStatement, compiled once), the
 * one place that decides whether an attempt may begin; the rare takeover of an attempt left
 * dispatched, or of a row another executor wrote to meanwhile, closes the interrupted
 * attempt in a transaction and runs the same statement there. Methods of DeliveryRecords
 * (index.ts).
 */

/** What beginAttempt decided. */
export type AttemptStart =
  | {
      kind: 'send';
      attempt: number;
      /** Identifies this executor's claim on the attempt: only it may mark the attempt dispatched. */
      startedAt: Date;
      url: string;
      payload: string;
      endpointId: string;
      secretKeyId: string;
      secretCiphertext: Buffer;
      signatureScheme: SignatureScheme;
      /** The secret before the endpoint's last rotation; it signs only while the overlap runs. */
      previousSecret: PreviousSecret | null;
    }
  | { kind: 'delivered'; attempt: number; status: number }
  | { kind: 'gone'; reason: string }
  | { kind: 'held'; sent: number }
  /** The endpoint has as many attempts in flight as it may: nothing was written, no attempt used; try again shortly. */
  | { kind: 'turn'; sent: number }
  | { kind: 'exhausted'; sent: number }
  /** An attempt of a worker that died after sending was closed as failed; the next one is due then. */
  | { kind: 'wait'; until: Date; sent: number };

/** A rotated-out secret, sealed, and when its overlap ends. */
export interface PreviousSecret {
  keyId: string;
  ciphertext: Buffer;
  scheme: SignatureScheme;
  endsAtMs: number;
}

/** The endpoint columns that sign an attempt, besides the current secret's. */
const SIGNING_COLUMNS = [
  'e.signature_scheme',
  'e.previous_secret_key_id',
  'e.previous_secret_ciphertext',
  'e.previous_signature_scheme',
  epochMs<number | null>('e.rotation_ends_at').as('rotation_ends_at_ms'),
] as const;

interface SigningRow {
  signature_scheme: SignatureScheme | null;
  previous_secret_key_id: string | null;
  previous_secret_ciphertext: Uint8Array | null;
  previous_signature_scheme: SignatureScheme | null;
  rotation_ends_at_ms: number | null;
}

function signingOf(row: SigningRow): { signatureScheme: SignatureScheme; previousSecret: PreviousSecret | null } {
  return {
    signatureScheme: row.signature_scheme ?? 'legacy',
    previousSecret:
      row.previous_secret_key_id && row.previous_secret_ciphertext && row.previous_signature_scheme && row.rotation_ends_at_ms !== null
        ? { keyId: row.previous_secret_key_id, ciphertext: Buffer.from(row.previous_secret_ciphertext), scheme: row.previous_signature_scheme, endsAtMs: row.rotation_ends_at_ms }
        : null,
  };
}

/** What beginAttempt's statement decided, before the rows it wrote. */
type AttemptDecision =
  | 'delivered'
  | 'failed'
  | 'dead_lettered'
  | 'takeover'
  | 'endpoint_missing'
  | 'endpoint_disabled'
  | 'exhausted'
  | 'held'
  | 'turn'
  | 'send';

/** What the statement behind beginAttempt and claimDue returns of each delivery it locked. */
interface BegunRow extends SigningRow {
  decision: AttemptDecision;
  attempt_count: number;
  last_response_status: number | null;
  payload: string;
  endpoint_id: string | null;
  url: string | null;
  secret_key_id: string | null;
  secret_ciphertext: Uint8Array | null;
  /** The attempt whose row it wrote; null when the row was another executor's to keep. */
  started: number | null;
}

/**
 * Which due deliveries a claim may take, and for whom. It takes them fairly: each endpoint's
 * oldest due first, round by round across endpoints (every endpoint's first, then every
 * endpoint's second...), and never more than an endpoint's free turns, so one endpoint's
 * backlog neither fills the slots nor delays another endpoint's first attempt.
 */
export interface ClaimOptions {
  owner: string;
  limit: number;
  leaseMs: number;
  /** Deliveries the claiming instance is working on already. */
  busy: string[];
}

/** A claimed delivery and its attempt as begun; null when beginAttempt must decide (claimDue). */
export interface ClaimedDelivery {
  ref: DeliveryRef;
  start: AttemptStart | null;
}

const ENDPOINT_MISSING = 'The endpoint no longer exists.';
const ENDPOINT_DISABLED = 'The endpoint is disabled.';

// Prepared: planning these CTEs took about as long as running them (PostgreSQL's log on a loaded 2-core machine).
const beginOne = new CompiledStatement((k: Kysely<Tables>, p: BeginParams) => beginStatement(k, p, false), { prepare: true });
const claimAndBegin = new CompiledStatement((k: Kysely<Tables>, p: BeginParams) => beginStatement(k, p, true), { prepare: true });

export const startMethods = {
  /**
   * Embedded engine: leases up to `limit` due deliveries to `owner`, fairly across endpoints
   * and within each endpoint's free turns (ClaimOptions), skipping rows another instance is
   * claiming right now and the ones this instance is already working on, and begins the
   * attempt of each in the same statement (beginStatement over the due rows a claim may take,
   * each leased or failed or held as it decided). A claimed delivery whose `start` is null
   * needs beginAttempt's transaction: an attempt of it was left dispatched but unfinished, or
   * another executor wrote to it meanwhile.
   */
  async claimDue(this: RecordsContext, em: EntityManager, options: ClaimOptions): Promise<ClaimedDelivery[]> {
    if (options.limit <= 0) return [];
    const now = new Date(this.schedule.now());
    const rows = await beginAttempts(em, this.schedule, now, { claim: options });
    return rows.map((row) => ({
      ref: { deliveryId: row.id, organizationId: row.organization_id, endpointId: row.delivery_endpoint_id, eventId: row.event_id },
      start: attemptStart(row, now),
    }));
  },

  /** Embedded engine: keeps a lease alive while its owner works; false when the owner lost it. */
  async renewLease(this: RecordsContext, em: EntityManager, deliveryId: string, owner: string, leaseMs: number): Promise<boolean> {
    const result = await db(em)
      .updateTable('webhook_deliveries')
      .set({ lease_until: new Date(this.schedule.now() + leaseMs) })
      .where('id', '=', deliveryId).where('lease_owner', '=', owner).where('lease_until', 'is not', null)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  },

  /** Embedded engine: gives a lease back, the delivery still due (its endpoint had no turn free), for the next claim. */
  async giveBackLease(this: RecordsContext, em: EntityManager, deliveryId: string, owner: string): Promise<void> {
    await db(em).updateTable('webhook_deliveries').set({ lease_until: null, lease_owner: null }).where('id', '=', deliveryId).where('lease_owner', '=', owner).execute();
  },

  /**
   * Starts an attempt. Under a lock on the delivery row, decides what the attempt may do:
   * a finished delivery stays finished; a missing or disabled endpoint fails it; a kill
   * switch or a paused endpoint holds it without using an attempt; an endpoint with all its
   * turns in flight leaves it as it is (`turn`: try again shortly); otherwise the next
   * attempt row is written (or the one a dead worker wrote but never sent is taken over) and
   * the caller sends.
   *
   * One statement decides and writes, so the common path costs one round trip. It reads
   * the attempts as of its snapshot, taken before it waited for the row's lock; when the row
   * changed meanwhile (another executor wrote to it), or an attempt was left dispatched but
   * unfinished, the rare takeover closes that attempt in a transaction and runs the same
   * statement there, on the latest rows.
   */
  async beginAttempt(this: RecordsContext, em: EntityManager, ref: DeliveryRef): Promise<AttemptStart> {
    const now = new Date(this.schedule.now());
    const [row] = await beginAttempts(em, this.schedule, now, { ref });
    if (!row) return { kind: 'gone', reason: 'The delivery record no longer exists.' };
    return attemptStart(row, now) ?? beginAttemptInTransaction(em, this.schedule, ref);
  },
};

/** Runs beginStatement for one delivery by reference, or for the due ones a claim may take. */
async function beginAttempts(em: EntityManager, schedule: Schedule, now: Date, which: { ref: DeliveryRef } | { claim: ClaimOptions }) {
  const common = { now, heldUntil: new Date(now.getTime() + schedule.retryIntervalMs), turns: schedule.endpointConcurrency, inFlightSince: new Date(now.getTime() - IN_FLIGHT_BOUND_MS) };
  if ('ref' in which) {
    return beginOne.execute(db(em), { ...common, deliveryId: which.ref.deliveryId, organizationId: which.ref.organizationId, leaseUntil: null, owner: null, limit: 1, busy: [] });
  }
  const { claim } = which;
  return claimAndBegin.execute(db(em), {
    ...common,
    deliveryId: null,
    organizationId: null,
    leaseUntil: new Date(now.getTime() + claim.leaseMs),
    owner: claim.owner,
    limit: claim.limit,
    busy: claim.busy,
  });
}

/**
 * The takeover: the path of an attempt left dispatched but unfinished (its executor died or
 * lost its lease after sending), and of a row another executor wrote to while the
 * one-statement path waited for it. Under the row's lock it closes the interrupted attempt
 * (and answers `wait` while that attempt's interval runs), then runs beginStatement itself:
 * inside the transaction the row no longer changes under it and no attempt is left open, so
 * the statement decides as on the common path.
 */
async function beginAttemptInTransaction(em: EntityManager, schedule: Schedule, ref: DeliveryRef): Promise<AttemptStart> {
  return em.transactional(async (tx) => {
    const k = db(tx);
    const now = new Date(schedule.now());
    const row = await k
      .selectFrom('webhook_deliveries')
      .select(['status', 'series', 'attempt_count'])
      .where('id', '=', ref.deliveryId)
      .where('organization_id', '=', ref.organizationId)
      .forUpdate()
      .executeTakeFirst();
    if (!row) return { kind: 'gone', reason: 'The delivery record no longer exists.' };
    if (isOpen(row.status)) {
      const waiting = await closeInterrupted(k, schedule, ref, row, now);
      if (waiting) return waiting;
    }
    const [begun] = await beginAttempts(tx, schedule, now, { ref });
    const start = begun && attemptStart(begun, now);
    if (!start) throw new Error(`attempt ${row.attempt_count + 1} of delivery ${ref.deliveryId} is already closed`);
    return start;
  });
}

/**
 * Closes the delivery's attempt left dispatched but unfinished, if any: its executor died
 * (or lost its lease) after sending, so the receiver may have it and it counts. The next
 * attempt is due one interval after it was sent; `wait` while that interval runs.
 */
async function closeInterrupted(
  k: Kysely<Tables>,
  schedule: Schedule,
  ref: DeliveryRef,
  row: { series: number; attempt_count: number },
  now: Date,
): Promise<Extract<AttemptStart, { kind: 'wait' }> | null> {
  const open = await k
    .selectFrom('delivery_attempts')
    .select(['attempt', epochMs('dispatched_at').as('dispatchedAtMs')])
    .where('delivery_id', '=', ref.deliveryId)
    .where('series', '=', row.series)
    .where('finished_at', 'is', null)
    .where('dispatched_at', 'is not', null)
    .executeTakeFirst();
  if (!open) return null;
  const sent = Math.max(row.attempt_count, open.attempt);
  await k
    .updateTable('delivery_attempts')
    .set({ finished_at: now, error: INTERRUPTED_ATTEMPT, error_class: 'interrupted' })
    .where('delivery_id', '=', ref.deliveryId)
    .where('series', '=', row.series)
    .where('attempt', '=', open.attempt)
    .execute();
  const until = new Date(open.dispatchedAtMs + schedule.retryIntervalMs);
  const waiting = sent < MAX_ATTEMPTS && until > now;
  await k
    .updateTable('webhook_deliveries')
    .set({
      status: 'retrying',
      attempt_count: sent,
      last_error: INTERRUPTED_ATTEMPT,
      last_response_status: null,
      next_attempt_at: sent < MAX_ATTEMPTS ? (waiting ? until : now) : null,
      ...(waiting && { lease_until: null, lease_owner: null }),
      updated_at: now,
    })
    .where('id', '=', ref.deliveryId)
    .execute();
  return waiting ? { kind: 'wait', until, sent } : null;
}

/** What the statement behind beginAttempt and claimDue is executed with. */
interface BeginParams {
  now: Date;
  heldUntil: Date;
  /** Attempts an endpoint may have in flight, counting those begun after inFlightSince. */
  turns: number;
  inFlightSince: Date;
  /** beginAttempt: the delivery. */
  deliveryId: string | null;
  organizationId: string | null;
  /** claimDue: the lease, how many and which not. */
  leaseUntil: Date | null;
  owner: string | null;
  limit: number;
  busy: string[];
}

/**
 * A delivery with its endpoint (none when it no longer exists) and the columns an attempt
 * starts from.
 */
function attemptSource(qc: QueryCreator<Tables>) {
  return qc
    .selectFrom('webhook_deliveries as d')
    .leftJoin('webhook_endpoints as e', (join) => join.onRef('e.id', '=', 'd.endpoint_id').onRef('e.organization_id', '=', 'd.organization_id'))
    .select([
      'd.status',
      'd.series',
      'd.attempt_count',
      'd.last_response_status',
      'd.payload',
      'e.id as endpoint_id',
      'e.url',
      'e.secret_key_id',
      'e.secret_ciphertext',
      ...SIGNING_COLUMNS,
    ]);
}

/**
 * The statement behind beginAttempt (`claim` false: one delivery by reference) and claimDue:
 * locks the delivery rows, decides for each what its attempt may do, and writes what it
 * decided: failed, held, or the attempt's row (and a claim's lease).
 */
function beginStatement(k: Kysely<Tables>, p: BeginParams, claim: boolean) {
  return k
    .with('locked', (w) =>
      attemptSource(w)
        .select(['d.id', 'd.organization_id', 'd.endpoint_id as delivery_endpoint_id', 'd.event_id'])
        .select((eb) =>
          sql<AttemptDecision>`case
            when d.status in ('delivered', 'failed', 'dead_lettered') then d.status::text
            when d.xmin::text <> (select s.xmin::text from webhook_deliveries s where s.id = d.id) then 'takeover'
            when exists (select 1 from delivery_attempts a where a.delivery_id = d.id and a.series = d.series and a.finished_at is null and a.dispatched_at is not null) then 'takeover'
            when e.id is null then 'endpoint_missing'
            when e.disabled_at is not null then 'endpoint_disabled'
            when d.attempt_count >= ${MAX_ATTEMPTS} then 'exhausted'
            when ${stoppedBy(eb.ref('d.organization_id'), eb.ref('d.endpoint_id'), eb.ref('d.event_type'))} then 'held'
            ${claim ? sql`` : sql`when coalesce(delivery_endpoint_in_flight(e.id, d.id, ${p.inFlightSince}), ${p.turns}) >= ${p.turns} then 'turn'`}
            else 'send'
          end`.as('decision'),
        )
        .$call((q) => {
          if (!claim) return q.where('d.id', '=', p.deliveryId!).where('d.organization_id', '=', p.organizationId!).forUpdate('d');
          // The due conditions again on the row itself: a row another claim leased and committed
          // after this statement's snapshot is re-checked at its lock, not taken twice. The picked
          // ids as an array, so the rows are looked up by key: as `in (subquery)`, a planner whose
          // statistics predate a burst scanned every due row against the pick (12 ms at 600 due).
          return q
            .where(sql<boolean>`d.id = any(array(${fairTurns(w, p)}))`)
            .where('d.status', 'in', OPEN_STATUSES)
            .where('d.next_attempt_at', '<=', p.now)
            .where((c) => c.or([c('d.lease_until', 'is', null), c('d.lease_until', '<', p.now)]))
            .forUpdate('d')
            .skipLocked();
        }),
    )
    .with('leased', (w) =>
      w
        .updateTable('webhook_deliveries')
        .from('locked')
        .set({ lease_until: p.leaseUntil, lease_owner: p.owner })
        .whereRef('webhook_deliveries.id', '=', 'locked.id')
        // beginAttempt works under the lease (or the Temporal activity) its caller holds already.
        .where(sql<boolean>`${claim}::boolean`)
        // Failing or holding a delivery gives its lease back.
        .where('locked.decision', 'not in', ['endpoint_missing', 'endpoint_disabled', 'held'])
        .returning('webhook_deliveries.id'),
    )
    .with('failed', (w) =>
      w
        .updateTable('webhook_deliveries')
        .from('locked')
        .set(failedColumns(p.now, sql<string>`case when locked.decision = 'endpoint_missing' then ${ENDPOINT_MISSING} else ${ENDPOINT_DISABLED} end`))
        .whereRef('webhook_deliveries.id', '=', 'locked.id')
        .where('locked.decision', 'in', ['endpoint_missing', 'endpoint_disabled'])
        .returning('webhook_deliveries.id'),
    )
    .with('held', (w) =>
      w
        .updateTable('webhook_deliveries')
        .from('locked')
        .set(heldColumns(p.now, p.heldUntil))
        .whereRef('webhook_deliveries.id', '=', 'locked.id')
        .where('locked.decision', '=', 'held')
        .returning('webhook_deliveries.id'),
    )
    .with('started', (w) =>
      w
        .insertInto('delivery_attempts')
        .columns(['delivery_id', 'series', 'attempt', 'started_at'])
        .expression(
          w
            .selectFrom('locked')
            .select(['locked.id', 'locked.series', sql<number>`locked.attempt_count + 1`.as('attempt'), sql<Date>`${p.now}::timestamptz`.as('started_at')])
            .where('locked.decision', '=', 'send'),
        )
        // An attempt row its worker never sent from (it died while connecting) is taken over.
        .onConflict((oc) =>
          oc
            .columns(['delivery_id', 'series', 'attempt'])
            .doUpdateSet({ started_at: p.now })
            .where('delivery_attempts.dispatched_at', 'is', null)
            .where('delivery_attempts.finished_at', 'is', null),
        )
        .returning(['delivery_id', 'attempt']),
    )
    .selectFrom('locked')
    .leftJoin('started', 'started.delivery_id', 'locked.id')
    .selectAll('locked')
    .select('started.attempt as started');
}

/**
 * The due deliveries a claim takes (ClaimOptions): each one's turn is its place among its
 * endpoint's due deliveries; one is taken only while its turn fits in the endpoint's free
 * turns (the turns less its unfinished attempts), earliest turns first. Another instance's
 * claim running at the same moment may count the same free turns: the cap holds per claim,
 * and across instances within the claims that overlap.
 */
function fairTurns(qc: QueryCreator<Tables>, p: BeginParams) {
  const inFlight = qc
    .selectFrom('delivery_attempts as a')
    .innerJoin('webhook_deliveries as f', 'f.id', 'a.delivery_id')
    .select((eb) => ['f.endpoint_id', eb.fn.countAll<number>().as('attempts')])
    .where('a.finished_at', 'is', null)
    .where('a.started_at', '>', p.inFlightSince)
    .groupBy('f.endpoint_id');
  const due = qc
    .selectFrom('webhook_deliveries as c')
    .select(['c.id', 'c.endpoint_id', 'c.next_attempt_at', sql<number>`row_number() over (partition by c.endpoint_id order by c.next_attempt_at, c.id)`.as('turn')])
    .where('c.status', 'in', OPEN_STATUSES)
    .where('c.next_attempt_at', '<=', p.now)
    .where((w) => w.or([w('c.lease_until', 'is', null), w('c.lease_until', '<', p.now)]))
    .where(sql<boolean>`c.id <> all(${p.busy}::uuid[])`);
  return qc
    .selectFrom(due.as('due'))
    .leftJoin(inFlight.as('busy'), 'busy.endpoint_id', 'due.endpoint_id')
    .select('due.id')
    .where(sql<number>`due.turn + coalesce(busy.attempts, 0)`, '<=', p.turns)
    .orderBy('due.turn')
    .orderBy('due.next_attempt_at')
    .limit(p.limit);
}

function isOpen(status: DeliveryStatus): boolean {
  return (OPEN_STATUSES as readonly DeliveryStatus[]).includes(status);
}

/** What a begun row means for its attempt; null when beginAttempt's transaction must decide. */
function attemptStart(row: BegunRow, now: Date): AttemptStart | null {
  switch (row.decision) {
    case 'delivered':
      return { kind: 'delivered', attempt: row.attempt_count, status: row.last_response_status ?? 200 };
    case 'failed':
      return { kind: 'gone', reason: 'The delivery already failed.' };
    case 'dead_lettered':
    case 'exhausted':
      return { kind: 'exhausted', sent: row.attempt_count };
    case 'endpoint_missing':
      return { kind: 'gone', reason: ENDPOINT_MISSING };
    case 'endpoint_disabled':
      return { kind: 'gone', reason: ENDPOINT_DISABLED };
    case 'held':
      return { kind: 'held', sent: row.attempt_count };
    case 'turn':
      return { kind: 'turn', sent: row.attempt_count };
    case 'takeover':
      return null;
    case 'send':
      // Null: the attempt's row was closed or sent by another executor after all.
      if (row.started === null) return null;
      return {
        kind: 'send',
        attempt: row.started,
        startedAt: now,
        url: row.url!,
        payload: row.payload,
        endpointId: row.endpoint_id!,
        secretKeyId: row.secret_key_id!,
        secretCiphertext: Buffer.from(row.secret_ciphertext!),
        ...signingOf(row),
      };
  }
}
