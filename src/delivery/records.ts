import { randomUUID } from 'node:crypto';
import { sql, type Expression, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import {
  CompiledStatement,
  epochMs,
  RESPONSE_EXCERPT_LENGTH,
  type AttemptErrorClass,
  type EntityManager,
  type DeadLetterSchema,
  type DeliveryAttemptSchema,
  type DeliveryStatus,
  type KillSwitchSchema,
  type SignatureScheme,
  type WebhookDeliverySchema,
  type WebhookEndpointSchema,
} from '../db';
import { MAX_ATTEMPTS, RETRY_INTERVAL_MS } from '../../workflows/policy';
import type { DeliveryRef } from './contract';
import { workflowIdFor } from './workflow-id';

/**
 * Timestamps are read as epoch milliseconds (epochMs): the driver hands timestamptz columns
 * to MikroORM as text, and a number typed in SQL cannot be mistaken for a Date.
 *
 * The only code that reads or writes delivery rows, their attempts, the dead-letter queue
 * and the kill switches. Each transition of a delivery is one named method here; both
 * engines and every service go through them, so the state machine lives in one file.
 *
 *   pending/retrying/held ──claimDue──► (leased) ──beginAttempt──► send | held | failed | exhausted
 *   (the embedded engine's claimDue leases and begins in one statement)
 *   send ──markAllDispatched──► (counted) ──recordOutcomes──► delivered | retrying | (8th) → deadLetter
 *   held ──releaseHeld / releaseHeldOfEndpoint──► due now
 *
 * An attempt counts (attempt_count) once its request may have reached the receiver, or
 * once it failed on the receiver's side of the network (DNS, connect, TLS): never for a
 * failure of ours (PostgreSQL unreachable, a worker that died before sending).
 */

/** Statuses in which a delivery still has work to do. */
export const OPEN_STATUSES = ['pending', 'retrying', 'held'] as const satisfies readonly DeliveryStatus[];
/** Statuses a delivery leaves only by a resend. */
export const FINAL_STATUSES = ['delivered', 'dead_lettered', 'failed'] as const satisfies readonly DeliveryStatus[];
/** Statuses of the deliveries a recovery resends: the ones the receiver never took. */
export const RECOVERABLE_STATUSES = ['dead_lettered', 'failed'] as const satisfies readonly DeliveryStatus[];

/** The scope of the kill switch that stops every organization. */
export const GLOBAL_SCOPE = 'global';

/** Delivery rows as the list route shows them: the five newest per endpoint. */
export const RECENT_DELIVERIES = 5;

/** last_error of an attempt whose outcome was lost with the process that made it. */
export const INTERRUPTED_ATTEMPT = 'The attempt was interrupted after its request was sent; its outcome is unknown.';

type Tables = InferKyselyDB<
  | typeof WebhookDeliverySchema
  | typeof DeliveryAttemptSchema
  | typeof DeadLetterSchema
  | typeof KillSwitchSchema
  | typeof WebhookEndpointSchema
>;

function db(em: EntityManager): Kysely<Tables> {
  return em.getKysely<Tables>();
}

/** A delivery as lists show it: the listed fields only (never the payload), timestamps as epoch milliseconds. */
export interface ListedDelivery {
  id: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  status: DeliveryStatus;
  attemptCount: number;
  nextAttemptAtMs: number | null;
  lastError: string | null;
  lastResponseStatus: number | null;
  workflowId: string;
  deliveredAtMs: number | null;
  createdAtMs: number;
  updatedAtMs: number;
  /** The series of attempts the delivery is in: 1, and one more for each resend. */
  series: number;
}

/** A delivery to record: one event for one endpoint. */
export interface NewDelivery {
  organizationId: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  /** The exact JSON body signed and sent on every attempt. */
  payload: string;
  workflowId: string;
}

/** A delivery of an event, with the URL of its endpoint (engines name the host to operators). */
export interface EventDelivery extends ListedDelivery {
  organizationId: string;
  endpointUrl: string;
}

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

/** Which due deliveries a claim may take, and for whom. */
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

/** One attempt of one delivery, as the executor that began it knows it. */
export interface AttemptKey {
  ref: DeliveryRef;
  attempt: number;
  /** The executor's claim on the attempt (AttemptStart's startedAt). */
  startedAt: Date;
}

/** What came back of a counted attempt: the receiver's status, and the error when it was not a 2xx. */
export interface AttemptResultRecord extends AttemptKey {
  status: number | null;
  error: string | null;
  /** Why it failed, by kind; null (or absent) when it was delivered. */
  errorClass?: AttemptErrorClass | null;
  /** The start of the receiver's answer (cut to RESPONSE_EXCERPT_LENGTH characters); null (or absent) when none came back. */
  excerpt?: string | null;
}

/** What recordOutcomes wrote of one attempt. */
export type RecordedOutcome =
  | { kind: 'delivered'; sent: number }
  | { kind: 'retrying'; sent: number; exhausted: boolean }
  /** Another executor had already closed this attempt and gone on; nothing was written. */
  | { kind: 'superseded' };

export interface KillSwitchState {
  scope: string;
  enabled: boolean;
  reason: string;
  updatedAt: Date | null;
}

export interface AttemptView {
  series: number;
  attempt: number;
  startedAt: Date;
  dispatchedAt: Date | null;
  finishedAt: Date | null;
  responseStatus: number | null;
  error: string | null;
  errorClass: AttemptErrorClass | null;
  responseExcerpt: string | null;
}

export interface DeliveryView extends ListedDelivery {
  organizationId: string;
  /** The exact body signed and sent on every attempt. */
  payload: string;
  attempts: AttemptView[];
  deadLetteredAt: Date | null;
}

/** Which of an endpoint's deliveries its log shows. */
export interface DeliveryLogFilter {
  organizationId: string;
  endpointId: string;
  statuses?: DeliveryStatus[];
  eventType?: string;
  since?: Date;
  until?: Date;
  before?: { at: Date; id: string };
  limit: number;
}

/** An endpoint's deliveries recorded in [since, until). */
export interface DeliveryWindow {
  organizationId: string;
  endpointId: string;
  since: Date;
  until: Date;
}

export interface DeadLetterFilter {
  organizationId?: string;
  endpointId?: string;
  since?: Date;
  until?: Date;
  before?: { at: Date; deliveryId: string };
  limit: number;
}

export interface DeadLetterView {
  deliveryId: string;
  organizationId: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  attemptCount: number;
  lastError: string | null;
  deadLetteredAt: Date;
  workflowId: string;
}

export class DeliveryRecords {
  private readonly now: () => number;
  private readonly interval: number;
  private readonly beginOne = new CompiledStatement((k: Kysely<Tables>, p: BeginParams) => beginStatement(k, p, false));
  private readonly claimAndBegin = new CompiledStatement((k: Kysely<Tables>, p: BeginParams) => beginStatement(k, p, true));
  private readonly dispatch = new CompiledStatement(dispatchStatement);
  private readonly outcome = new CompiledStatement(outcomeStatement);
  // Building the lateral join's tree on every list call was about 6% of the call's CPU.
  private readonly recent = new CompiledStatement((k: Kysely<Tables>, p: { endpointIds: string[] }) => recentDeliveriesQuery(k, p.endpointIds));

  constructor(options: { now?: () => number; retryIntervalMs?: number } = {}) {
    this.now = options.now ?? Date.now;
    this.interval = options.retryIntervalMs ?? RETRY_INTERVAL_MS;
  }

  /**
   * Records deliveries, pending and due now, in one statement. (endpoint, event id) is
   * unique: a delivery that exists already is returned as it is, never made twice.
   */
  async record(em: EntityManager, deliveries: NewDelivery[]): Promise<ListedDelivery[]> {
    if (deliveries.length === 0) return [];
    const now = new Date(this.now());
    const rows = deliveries.map((d) => ({
      id: randomUUID(),
      organization_id: d.organizationId,
      endpoint_id: d.endpointId,
      event_id: d.eventId,
      event_type: d.eventType,
      payload: d.payload,
      status: 'pending' as const,
      series: 1,
      attempt_count: 0,
      next_attempt_at: now,
      workflow_id: d.workflowId,
      created_at: now,
      updated_at: now,
    }));
    await db(em).insertInto('webhook_deliveries').values(rows).onConflict((oc) => oc.columns(['endpoint_id', 'event_id']).doNothing()).execute();
    return this.listed(em, (q) =>
      q.where((eb) => eb.or(deliveries.map((d) => eb.and([eb('w.endpoint_id', '=', d.endpointId), eb('w.event_id', '=', d.eventId)])))),
    );
  }

  /** Every delivery of the given events, each event's oldest endpoint first, with its endpoint's URL. */
  async listByEvents(em: EntityManager, events: { organizationId: string; eventId: string }[]): Promise<EventDelivery[]> {
    if (events.length === 0) return [];
    return listedQuery(db(em))
      .innerJoin('webhook_endpoints as e', 'e.id', 'w.endpoint_id')
      .select(['e.url as endpointUrl', 'w.organization_id as organizationId'])
      .where((eb) =>
        eb(
          eb.refTuple('w.organization_id', 'w.event_id'),
          'in',
          events.map((e) => eb.tuple(e.organizationId, e.eventId)),
        ),
      )
      .orderBy('w.created_at')
      .orderBy('e.created_at')
      .orderBy('w.endpoint_id')
      .execute();
  }

  /**
   * The newest deliveries of many endpoints in one query: a lateral join walks the
   * (endpoint_id, created_at desc) index for each endpoint and stops after five, so the
   * cost does not grow with the history. The ids are the organization's own (the caller
   * read them scoped to it).
   */
  async listRecent(em: EntityManager, endpointIds: string[]): Promise<Map<string, ListedDelivery[]>> {
    const byEndpoint = new Map<string, ListedDelivery[]>(endpointIds.map((id) => [id, []]));
    if (endpointIds.length === 0) return byEndpoint;
    const rows = await this.recent.execute(db(em), { endpointIds });
    for (const { sortAt: _, ...row } of rows) byEndpoint.get(row.endpointId)?.push(row);
    return byEndpoint;
  }

  /**
   * Embedded engine: leases up to `limit` due deliveries to `owner`, oldest due first,
   * skipping rows another instance is claiming right now and the ones this instance is
   * already working on, and begins the attempt of each in the same statement (what
   * beginAttempt would decide and write). A claimed delivery whose `start` is null needs
   * beginAttempt's transaction: an attempt of it was left dispatched but unfinished, or
   * another executor wrote to it meanwhile.
   */
  async claimDue(em: EntityManager, options: ClaimOptions): Promise<ClaimedDelivery[]> {
    if (options.limit <= 0) return [];
    const now = new Date(this.now());
    const rows = await this.beginAttempts(em, now, { claim: options });
    return rows.map((row) => ({
      ref: { deliveryId: row.id, organizationId: row.organization_id, endpointId: row.delivery_endpoint_id, eventId: row.event_id },
      start: attemptStart(row, now),
    }));
  }

  /** Embedded engine: keeps a lease alive while its owner works; false when the owner lost it. */
  async renewLease(em: EntityManager, deliveryId: string, owner: string, leaseMs: number): Promise<boolean> {
    const result = await db(em)
      .updateTable('webhook_deliveries')
      .set({ lease_until: new Date(this.now() + leaseMs) })
      .where('id', '=', deliveryId)
      .where('lease_owner', '=', owner)
      .where('lease_until', 'is not', null)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /**
   * Starts an attempt. Under a lock on the delivery row, decides what the attempt may do:
   * a finished delivery stays finished; a missing or disabled endpoint fails it; a kill
   * switch or a paused endpoint holds it without using an attempt; otherwise the next attempt row is written
   * (or the one a dead worker wrote but never sent is taken over) and the caller sends.
   *
   * One statement decides and writes, so the common path costs one round trip. It reads
   * the attempts as of its snapshot, taken before it waited for the row's lock; when the row
   * changed meanwhile (another executor wrote to it), or an attempt was left dispatched but
   * unfinished, the rare takeover runs as a transaction, each step seeing the latest rows.
   */
  async beginAttempt(em: EntityManager, ref: DeliveryRef): Promise<AttemptStart> {
    const now = new Date(this.now());
    const [row] = await this.beginAttempts(em, now, { ref });
    if (!row) return { kind: 'gone', reason: 'The delivery record no longer exists.' };
    return attemptStart(row, now) ?? this.beginAttemptInTransaction(em, ref);
  }

  /** Runs beginStatement for one delivery by reference, or for the due ones a claim may take. */
  private async beginAttempts(em: EntityManager, now: Date, which: { ref: DeliveryRef } | { claim: ClaimOptions }) {
    const common = { now, heldUntil: new Date(now.getTime() + this.interval) };
    if ('ref' in which) {
      return this.beginOne.execute(db(em), { ...common, deliveryId: which.ref.deliveryId, organizationId: which.ref.organizationId, leaseUntil: null, owner: null, limit: 1, busy: [] });
    }
    const { claim } = which;
    return this.claimAndBegin.execute(db(em), {
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
   * beginAttempt step by step, under the row's lock: the path of an attempt left
   * dispatched but unfinished (its executor died or lost its lease after sending), and of a
   * row another executor wrote to while the one-statement path waited for it.
   */
  private async beginAttemptInTransaction(em: EntityManager, ref: DeliveryRef): Promise<AttemptStart> {
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.now());
      const row = await k
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
          'e.disabled_at',
          'e.secret_key_id',
          'e.secret_ciphertext',
          ...SIGNING_COLUMNS,
        ])
        .select((eb) => stoppedBy(eb.ref('d.organization_id'), eb.ref('d.endpoint_id')).as('stopped'))
        .where('d.id', '=', ref.deliveryId)
        .where('d.organization_id', '=', ref.organizationId)
        .forUpdate('d')
        .executeTakeFirst();
      if (!row) return { kind: 'gone', reason: 'The delivery record no longer exists.' };
      if (row.status === 'delivered') return { kind: 'delivered', attempt: row.attempt_count, status: row.last_response_status ?? 200 };
      if (row.status === 'failed') return { kind: 'gone', reason: 'The delivery already failed.' };
      if (row.status === 'dead_lettered') return { kind: 'exhausted', sent: row.attempt_count };

      let sent = row.attempt_count;
      const open = await k
        .selectFrom('delivery_attempts')
        .select(['attempt', epochMs('dispatched_at').as('dispatchedAtMs')])
        .where('delivery_id', '=', ref.deliveryId)
        .where('series', '=', row.series)
        .where('finished_at', 'is', null)
        .where('dispatched_at', 'is not', null)
        .executeTakeFirst();
      if (open) {
        // Its executor died (or lost its lease) after sending: the receiver may have it, so it counts.
        sent = Math.max(sent, open.attempt);
        await k
          .updateTable('delivery_attempts')
          .set({ finished_at: now, error: INTERRUPTED_ATTEMPT, error_class: 'interrupted' })
          .where('delivery_id', '=', ref.deliveryId)
          .where('series', '=', row.series)
          .where('attempt', '=', open.attempt)
          .execute();
        const until = new Date(open.dispatchedAtMs + this.interval);
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
        if (waiting) return { kind: 'wait', until, sent };
      }

      if (!row.endpoint_id || row.disabled_at) {
        const reason = row.endpoint_id ? ENDPOINT_DISABLED : ENDPOINT_MISSING;
        await this.fail(tx, ref, reason);
        return { kind: 'gone', reason };
      }
      if (sent >= MAX_ATTEMPTS) return { kind: 'exhausted', sent };
      if (row.stopped) {
        await this.hold(tx, ref);
        return { kind: 'held', sent };
      }

      const attempt = sent + 1;
      // An attempt row its worker never sent from (it died while connecting) is taken over.
      const claimed = await k
        .insertInto('delivery_attempts')
        .values({ delivery_id: ref.deliveryId, series: row.series, attempt, started_at: now })
        .onConflict((oc) =>
          oc
            .columns(['delivery_id', 'series', 'attempt'])
            .doUpdateSet({ started_at: now })
            .where('delivery_attempts.dispatched_at', 'is', null)
            .where('delivery_attempts.finished_at', 'is', null),
        )
        .returning('attempt')
        .executeTakeFirst();
      if (!claimed) throw new Error(`attempt ${attempt} of delivery ${ref.deliveryId} is already closed`);
      return {
        kind: 'send',
        attempt,
        startedAt: now,
        url: row.url!,
        payload: row.payload,
        endpointId: row.endpoint_id,
        secretKeyId: row.secret_key_id!,
        secretCiphertext: Buffer.from(row.secret_ciphertext!),
        ...signingOf(row),
      };
    });
  }

  /**
   * The connection to the receiver stands and the request is about to be written: from
   * here on the attempt counts. Refused (false) when a kill switch came on (or the endpoint
   * was paused) meanwhile, the delivery finished, or another executor took the attempt over;
   * then nothing is sent. Attempts of several deliveries (one each) go in one statement:
   * what a group commit of concurrent attempts writes. One answer per attempt, in their order.
   */
  async markAllDispatched(em: EntityManager, attempts: AttemptKey[]): Promise<boolean[]> {
    const rows = await this.dispatch.execute(db(em), { now: new Date(this.now()), ...attemptColumns(attempts) });
    const counted = new Set(rows.map((r) => r.id));
    return attempts.map((a) => counted.has(a.ref.deliveryId));
  }

  /**
   * Writes an attempt's result: delivered, or retrying with the next attempt one interval
   * later (none after the last). Counted attempts only: a failure before anything reached
   * the receiver's network is not an attempt and is never recorded here. Idempotent: an
   * attempt another executor already closed as interrupted takes this real outcome instead,
   * unless a later attempt was sent meanwhile. One statement writes the attempt's row and
   * the delivery's together, or neither; attempts of several deliveries (one each) go in
   * that one statement: what a group commit of concurrent attempts writes. One answer per
   * attempt, in their order.
   */
  async recordOutcomes(em: EntityManager, outcomes: AttemptResultRecord[]): Promise<RecordedOutcome[]> {
    const now = new Date(this.now());
    const rows = await this.outcome.execute(db(em), {
      now,
      next: new Date(now.getTime() + this.interval),
      ...attemptColumns(outcomes),
      status: outcomes.map((o) => o.status),
      error: outcomes.map((o) => o.error),
      errorClass: outcomes.map((o) => o.errorClass ?? null),
      excerpt: outcomes.map((o) => o.excerpt?.slice(0, RESPONSE_EXCERPT_LENGTH) ?? null),
    });
    const closed = new Set(rows.map((r) => r.delivery_id));
    return outcomes.map((o): RecordedOutcome => {
      if (!closed.has(o.ref.deliveryId)) return { kind: 'superseded' };
      return o.error === null ? { kind: 'delivered', sent: o.attempt } : { kind: 'retrying', sent: o.attempt, exhausted: o.attempt >= MAX_ATTEMPTS };
    });
  }

  /** A kill switch is on or the endpoint paused: the delivery waits one interval (or until released) without using an attempt. */
  async hold(em: EntityManager, ref: DeliveryRef): Promise<void> {
    const now = new Date(this.now());
    await db(em)
      .updateTable('webhook_deliveries')
      .set(heldColumns(now, new Date(now.getTime() + this.interval)))
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  }

  /** The endpoint is missing or disabled: the delivery fails at once with the reason, never retried. */
  async fail(em: EntityManager, ref: DeliveryRef, reason: string): Promise<void> {
    await db(em)
      .updateTable('webhook_deliveries')
      .set(failedColumns(new Date(this.now()), reason))
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  }

  /** All attempts are used: the delivery is dead-lettered and queued for operators. False when it had already finished. */
  /**
   * Ends a delivery dead-lettered. `reason`: a failure of ours ended it (not the receiver's);
   * it becomes the last error, and an attempt begun but never sent is closed with it, so it
   * never reads as a request that was made.
   */
  async deadLetter(em: EntityManager, ref: DeliveryRef, reason?: string): Promise<boolean> {
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.now());
      const updated = await k
        .updateTable('webhook_deliveries')
        .set({ status: 'dead_lettered', next_attempt_at: null, lease_until: null, lease_owner: null, updated_at: now, ...(reason !== undefined && { last_error: reason }) })
        .where('id', '=', ref.deliveryId)
        .where('organization_id', '=', ref.organizationId)
        .where('status', 'in', OPEN_STATUSES)
        .returning('last_error')
        .executeTakeFirst();
      if (!updated) return false;
      if (reason !== undefined) {
        await k
          .updateTable('delivery_attempts')
          .set({ finished_at: now, error: reason })
          .where('delivery_id', '=', ref.deliveryId)
          .where('dispatched_at', 'is', null)
          .where('finished_at', 'is', null)
          .execute();
      }
      await k
        .insertInto('dead_letters')
        .values({ delivery_id: ref.deliveryId, organization_id: ref.organizationId, endpoint_id: ref.endpointId, last_error: updated.last_error, created_at: now })
        .onConflict((oc) => oc.column('delivery_id').doNothing())
        .execute();
      return true;
    });
  }

  /** A kill switch went off: the deliveries it held are due now. Returns them (Temporal signals their workflows). */
  async releaseHeld(em: EntityManager, scope: string): Promise<{ deliveryId: string; workflowId: string }[]> {
    return this.releaseHeldOf(em, scope === GLOBAL_SCOPE ? {} : { organizationId: scope });
  }

  /** An endpoint was resumed: its held deliveries are due now, as a kill switch's release makes them. Returns them. */
  async releaseHeldOfEndpoint(em: EntityManager, organizationId: string, endpointId: string): Promise<{ deliveryId: string; workflowId: string }[]> {
    return this.releaseHeldOf(em, { organizationId, endpointId });
  }

  private async releaseHeldOf(em: EntityManager, of: { organizationId?: string; endpointId?: string }): Promise<{ deliveryId: string; workflowId: string }[]> {
    const now = new Date(this.now());
    let q = db(em).updateTable('webhook_deliveries').set({ next_attempt_at: now, updated_at: now }).where('status', '=', 'held');
    if (of.organizationId) q = q.where('organization_id', '=', of.organizationId);
    if (of.endpointId) q = q.where('endpoint_id', '=', of.endpointId);
    const rows = await q.returning(['id', 'workflow_id']).execute();
    return rows.map((r) => ({ deliveryId: r.id, workflowId: r.workflow_id }));
  }

  async readKillSwitch(em: EntityManager, scope: string): Promise<KillSwitchState> {
    const row = await db(em)
      .selectFrom('kill_switches')
      .select(['scope', 'enabled', 'reason', epochMs('updated_at').as('updatedAtMs')])
      .where('scope', '=', scope)
      .executeTakeFirst();
    return row ? { scope: row.scope, enabled: row.enabled, reason: row.reason, updatedAt: new Date(row.updatedAtMs) } : { scope, enabled: false, reason: '', updatedAt: null };
  }

  /** Sets a switch; turning one off releases what it held (releaseHeld) and returns those deliveries. */
  async writeKillSwitch(
    em: EntityManager,
    scope: string,
    enabled: boolean,
    reason: string,
  ): Promise<{ state: KillSwitchState; released: { deliveryId: string; workflowId: string }[] }> {
    const now = new Date(this.now());
    await db(em)
      .insertInto('kill_switches')
      .values({ scope, enabled, reason, updated_at: now })
      .onConflict((oc) => oc.column('scope').doUpdateSet({ enabled, reason, updated_at: now }))
      .execute();
    const released = enabled ? [] : await this.releaseHeld(em, scope);
    return { state: { scope, enabled, reason, updatedAt: now }, released };
  }

  /** Switches on now: the global one (0 or 1) and how many organizations'. */
  async killSwitchesOn(em: EntityManager): Promise<{ global: number; organizations: number }> {
    const rows = await db(em).selectFrom('kill_switches').select(['scope']).where('enabled', '=', true).execute();
    const global = rows.filter((r) => r.scope === GLOBAL_SCOPE).length;
    return { global, organizations: rows.length - global };
  }

  async deadLetterCount(em: EntityManager): Promise<number> {
    const row = await db(em).selectFrom('dead_letters').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /** Seconds the oldest due delivery has waited (0 when none is due): how far the engine is behind. */
  async lagSeconds(em: EntityManager): Promise<number> {
    const now = this.now();
    const row = await db(em)
      .selectFrom('webhook_deliveries')
      .select(sql<number | null>`floor(extract(epoch from min(next_attempt_at)) * 1000)::float8`.as('dueMs'))
      .where('status', 'in', OPEN_STATUSES)
      .where('next_attempt_at', '<=', new Date(now))
      .executeTakeFirst();
    return row?.dueMs ? Math.max(0, (now - row.dueMs) / 1000) : 0;
  }

  /** Temporal: deliveries still pending this long after they were recorded (their start may have failed). */
  async pendingSince(em: EntityManager, cutoff: Date, limit: number): Promise<(DeliveryRef & { eventType: string; url: string; series: number })[]> {
    const rows = await db(em)
      .selectFrom('webhook_deliveries as d')
      .innerJoin('webhook_endpoints as e', 'e.id', 'd.endpoint_id')
      .select(['d.id', 'd.organization_id', 'd.endpoint_id', 'd.event_id', 'd.event_type', 'e.url', 'd.series'])
      .where('d.status', '=', 'pending')
      .where('d.created_at', '<', cutoff)
      .orderBy('d.created_at')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ deliveryId: r.id, organizationId: r.organization_id, endpointId: r.endpoint_id, eventId: r.event_id, eventType: r.event_type, url: r.url, series: r.series }));
  }

  /** A delivery with every attempt, for operators: by id, or by endpoint and event id. */
  async lookup(em: EntityManager, by: { deliveryId: string } | { endpointId: string; eventId: string }): Promise<DeliveryView | null> {
    let q = db(em).selectFrom('webhook_deliveries as w').select(listedColumns).select(['w.organization_id as organizationId', 'w.payload as payload']);
    q = 'deliveryId' in by ? q.where('w.id', '=', by.deliveryId) : q.where('w.endpoint_id', '=', by.endpointId).where('w.event_id', '=', by.eventId);
    const delivery = await q.executeTakeFirst();
    if (!delivery) return null;
    const [attempts, dead] = await Promise.all([
      db(em)
        .selectFrom('delivery_attempts')
        .select([
          'series',
          'attempt',
          epochMs('started_at').as('startedAtMs'),
          epochMs<number | null>('dispatched_at').as('dispatchedAtMs'),
          epochMs<number | null>('finished_at').as('finishedAtMs'),
          'response_status',
          'error',
          'error_class',
          'response_excerpt',
        ])
        .where('delivery_id', '=', delivery.id)
        .orderBy('series')
        .orderBy('attempt')
        .execute(),
      db(em).selectFrom('dead_letters').select(epochMs('created_at').as('atMs')).where('delivery_id', '=', delivery.id).executeTakeFirst(),
    ]);
    return {
      ...delivery,
      attempts: attempts.map((a) => ({
        series: a.series,
        attempt: a.attempt,
        startedAt: new Date(a.startedAtMs),
        dispatchedAt: a.dispatchedAtMs === null ? null : new Date(a.dispatchedAtMs),
        finishedAt: a.finishedAtMs === null ? null : new Date(a.finishedAtMs),
        responseStatus: a.response_status,
        error: a.error,
        errorClass: a.error_class,
        responseExcerpt: a.response_excerpt,
      })),
      deadLetteredAt: dead ? new Date(dead.atMs) : null,
    };
  }

  /**
   * An endpoint's delivery log, newest first (created_at, then id, both descending), read
   * along the (endpoint_id, created_at desc, id desc) index; `before` continues after the
   * last delivery of the previous page.
   */
  async listForEndpoint(em: EntityManager, filter: DeliveryLogFilter): Promise<ListedDelivery[]> {
    let q = listedQuery(db(em)).where('w.endpoint_id', '=', filter.endpointId).where('w.organization_id', '=', filter.organizationId);
    if (filter.statuses && filter.statuses.length > 0) q = q.where('w.status', 'in', filter.statuses);
    if (filter.eventType) q = q.where('w.event_type', '=', filter.eventType);
    if (filter.since) q = q.where('w.created_at', '>=', filter.since);
    if (filter.until) q = q.where('w.created_at', '<', filter.until);
    const before = filter.before;
    if (before) q = q.where((eb) => eb(eb.refTuple('w.created_at', 'w.id'), '<', eb.tuple(before.at, before.id)));
    return q.orderBy('w.created_at', 'desc').orderBy('w.id', 'desc').limit(filter.limit).execute();
  }

  /**
   * Starts a new series of attempts on a finished delivery, in the caller's transaction:
   * pending and due now, attempts counted from 0 again under the next series number, its
   * own workflow id, off the dead-letter queue. The event id, body and (endpoint, event id)
   * stay the delivery's. Only a delivery in one of `from` is resent; any other answers
   * with its status and is left as it is.
   */
  async resend(
    em: EntityManager,
    which: { deliveryId: string; organizationId: string; endpointId?: string },
    from: readonly DeliveryStatus[] = FINAL_STATUSES,
  ): Promise<{ resent: ListedDelivery } | { refused: DeliveryStatus } | null> {
    const k = db(em);
    let q = k
      .selectFrom('webhook_deliveries')
      .select(['id', 'organization_id', 'endpoint_id', 'event_id', 'status', 'series'])
      .where('id', '=', which.deliveryId)
      .where('organization_id', '=', which.organizationId);
    if (which.endpointId) q = q.where('endpoint_id', '=', which.endpointId);
    const row = await q.forUpdate().executeTakeFirst();
    if (!row) return null;
    if (!from.includes(row.status)) return { refused: row.status };
    const now = new Date(this.now());
    const series = row.series + 1;
    await k
      .updateTable('webhook_deliveries')
      .set({
        status: 'pending',
        series,
        attempt_count: 0,
        next_attempt_at: now,
        last_error: null,
        last_response_status: null,
        delivered_at: null,
        lease_until: null,
        lease_owner: null,
        workflow_id: workflowIdFor({ organizationId: row.organization_id, endpointId: row.endpoint_id, eventId: row.event_id }, series),
        updated_at: now,
      })
      .where('id', '=', row.id)
      .execute();
    await k.deleteFrom('dead_letters').where('delivery_id', '=', row.id).execute();
    const [resent] = await this.listed(em, (l) => l.where('w.id', '=', row.id));
    return { resent: resent! };
  }

  /** How many of an endpoint's deliveries recorded in [since, until) are in one of `statuses`. */
  async countInWindow(em: EntityManager, window: DeliveryWindow, statuses: readonly DeliveryStatus[]): Promise<number> {
    const row = await windowQuery(db(em), window, statuses)
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /** The next `limit` of an endpoint's deliveries in [since, until) in one of `statuses`, oldest first, after `after`. */
  async nextInWindow(
    em: EntityManager,
    window: DeliveryWindow,
    statuses: readonly DeliveryStatus[],
    after: { at: Date; id: string } | null,
    limit: number,
  ): Promise<{ id: string; createdAtMs: number }[]> {
    let q = windowQuery(db(em), window, statuses).select(['w.id', epochMs('w.created_at').as('createdAtMs')]);
    if (after) q = q.where((eb) => eb(eb.refTuple('w.created_at', 'w.id'), '>', eb.tuple(after.at, after.id)));
    return q.orderBy('w.created_at').orderBy('w.id').limit(limit).execute();
  }

  /** The dead-letter queue, newest first. */
  async listDeadLetters(em: EntityManager, filter: DeadLetterFilter): Promise<DeadLetterView[]> {
    let q = db(em)
      .selectFrom('dead_letters as l')
      .innerJoin('webhook_deliveries as d', 'd.id', 'l.delivery_id')
      .select([
        'l.delivery_id as deliveryId',
        'l.organization_id as organizationId',
        'l.endpoint_id as endpointId',
        epochMs('l.created_at').as('deadLetteredAtMs'),
        'd.event_id as eventId',
        'd.event_type as eventType',
        'd.attempt_count as attemptCount',
        'd.last_error as lastError',
        'd.workflow_id as workflowId',
      ]);
    if (filter.organizationId) q = q.where('l.organization_id', '=', filter.organizationId);
    if (filter.endpointId) q = q.where('l.endpoint_id', '=', filter.endpointId);
    if (filter.since) q = q.where('l.created_at', '>=', filter.since);
    if (filter.until) q = q.where('l.created_at', '<', filter.until);
    const before = filter.before;
    if (before) q = q.where((eb) => eb(eb.refTuple('l.created_at', 'l.delivery_id'), '<', eb.tuple(before.at, before.deliveryId)));
    const rows = await q.orderBy('l.created_at', 'desc').orderBy('l.delivery_id', 'desc').limit(filter.limit).execute();
    return rows.map(({ deadLetteredAtMs, ...row }) => ({ ...row, deadLetteredAt: new Date(deadLetteredAtMs) }));
  }

  private async listed(
    em: EntityManager,
    where: (q: ReturnType<typeof listedQuery>) => ReturnType<typeof listedQuery>,
  ): Promise<ListedDelivery[]> {
    return where(listedQuery(db(em))).execute();
  }
}

/** What the statement behind beginAttempt and claimDue is executed with. */
interface BeginParams {
  now: Date;
  heldUntil: Date;
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
 * The statement behind beginAttempt (`claim` false: one delivery by reference) and claimDue:
 * locks the delivery rows, decides for each what its attempt may do, and writes what it
 * decided: failed, held, or the attempt's row (and a claim's lease).
 */
function beginStatement(k: Kysely<Tables>, p: BeginParams, claim: boolean) {
  return k
    .with('locked', (w) =>
      w
        .selectFrom('webhook_deliveries as d')
        .leftJoin('webhook_endpoints as e', (join) => join.onRef('e.id', '=', 'd.endpoint_id').onRef('e.organization_id', '=', 'd.organization_id'))
        .select([
          'd.id',
          'd.organization_id',
          'd.endpoint_id as delivery_endpoint_id',
          'd.event_id',
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
        ])
        .select((eb) =>
          sql<AttemptDecision>`case
            when d.status in ('delivered', 'failed', 'dead_lettered') then d.status::text
            when d.xmin::text <> (select s.xmin::text from webhook_deliveries s where s.id = d.id) then 'takeover'
            when exists (select 1 from delivery_attempts a where a.delivery_id = d.id and a.series = d.series and a.finished_at is null and a.dispatched_at is not null) then 'takeover'
            when e.id is null then 'endpoint_missing'
            when e.disabled_at is not null then 'endpoint_disabled'
            when d.attempt_count >= ${MAX_ATTEMPTS} then 'exhausted'
            when ${stoppedBy(eb.ref('d.organization_id'), eb.ref('d.endpoint_id'))} then 'held'
            else 'send'
          end`.as('decision'),
        )
        .$call((q) => {
          if (!claim) return q.where('d.id', '=', p.deliveryId!).where('d.organization_id', '=', p.organizationId!).forUpdate('d');
          return q
            .where('d.status', 'in', OPEN_STATUSES)
            .where('d.next_attempt_at', '<=', p.now)
            .where((w) => w.or([w('d.lease_until', 'is', null), w('d.lease_until', '<', p.now)]))
            .where(sql<boolean>`d.id <> all(${p.busy}::uuid[])`)
            .orderBy('d.next_attempt_at')
            .limit(p.limit)
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

/** A delivery held by a kill switch until `until` (or its release): what hold and beginAttempt write. */
function heldColumns(now: Date, until: Date) {
  return { status: 'held', next_attempt_at: until, lease_until: null, lease_owner: null, updated_at: now } as const;
}

/** A delivery failed for good, with its reason: what fail and beginAttempt write. */
function failedColumns(now: Date, reason: string | Expression<string>) {
  return { status: 'failed', last_error: reason, next_attempt_at: null, lease_until: null, lease_owner: null, updated_at: now } as const;
}

/** Attempts column by column: one parameter each, however many attempts. */
interface AttemptColumns {
  ids: string[];
  attempts: number[];
  starts: string[];
}

function attemptColumns(keys: AttemptKey[]): AttemptColumns {
  return { ids: keys.map((k) => k.ref.deliveryId), attempts: keys.map((k) => k.attempt), starts: keys.map((k) => k.startedAt.toISOString()) };
}

/** Attempts as a table `v` (delivery_id, attempt, started_at). */
function attemptKeys(p: AttemptColumns) {
  return sql<{ delivery_id: string; attempt: number; started_at: Date }>`(select * from unnest(${p.ids}::uuid[], ${p.attempts}::int[], ${p.starts}::timestamptz[])
    as v(delivery_id, attempt, started_at))`.as('v');
}

/** Attempts with their results as a table `v` (delivery_id, attempt, started_at, response_status, error). */
function attemptResults(p: AttemptResultColumns) {
  return sql<{
    delivery_id: string;
    attempt: number;
    started_at: Date;
    response_status: number | null;
    error: string | null;
    error_class: AttemptErrorClass | null;
    response_excerpt: string | null;
  }>`(select * from unnest(
    ${p.ids}::uuid[], ${p.attempts}::int[], ${p.starts}::timestamptz[], ${p.status}::int[], ${p.error}::text[], ${p.errorClass}::text[], ${p.excerpt}::text[]
  ) as v(delivery_id, attempt, started_at, response_status, error, error_class, response_excerpt))`.as('v');
}

/** Attempt results column by column (recordOutcomes). */
type AttemptResultColumns = AttemptColumns & {
  status: (number | null)[];
  error: (string | null)[];
  errorClass: (AttemptErrorClass | null)[];
  excerpt: (string | null)[];
};

/** markAllDispatched's statement. */
function dispatchStatement(k: Kysely<Tables>, p: AttemptColumns & { now: Date }) {
  return k
    .with('marked', (w) =>
      w
        .updateTable('delivery_attempts as a')
        .from(attemptKeys(p))
        .set({ dispatched_at: p.now })
        .whereRef('a.delivery_id', '=', 'v.delivery_id')
        .whereRef('a.attempt', '=', 'v.attempt')
        .whereRef('a.started_at', '=', 'v.started_at')
        .where('a.dispatched_at', 'is', null)
        .where('a.finished_at', 'is', null)
        .where((eb) =>
          eb.exists(
            eb
              .selectFrom('webhook_deliveries as d')
              .select('d.id')
              .whereRef('d.id', '=', 'v.delivery_id')
              .whereRef('d.series', '=', 'a.series')
              .where('d.status', 'in', OPEN_STATUSES)
              .where((s) => s.not(stoppedBy(s.ref('d.organization_id'), s.ref('d.endpoint_id')))),
          ),
        )
        .returning(['a.delivery_id', 'a.attempt']),
    )
    .updateTable('webhook_deliveries')
    .from('marked')
    .set({ attempt_count: sql<number>`marked.attempt`, updated_at: p.now })
    .whereRef('webhook_deliveries.id', '=', 'marked.delivery_id')
    .returning('webhook_deliveries.id');
}

/** recordOutcomes' statement: `next` is when a failed attempt's successor is due. */
function outcomeStatement(k: Kysely<Tables>, p: AttemptResultColumns & { now: Date; next: Date }) {
  return k
    .with('closed', (w) =>
      w
        .updateTable('delivery_attempts as a')
        .from(attemptResults(p))
        .set({
          finished_at: p.now,
          response_status: sql<number | null>`v.response_status`,
          error: sql<string | null>`v.error`,
          error_class: sql<AttemptErrorClass | null>`v.error_class`,
          response_excerpt: sql<string | null>`v.response_excerpt`,
        })
        .whereRef('a.delivery_id', '=', 'v.delivery_id')
        .whereRef('a.attempt', '=', 'v.attempt')
        .whereRef('a.started_at', '=', 'v.started_at')
        .where((eb) => eb.or([eb('a.finished_at', 'is', null), eb('a.error', '=', INTERRUPTED_ATTEMPT)]))
        // Once a later attempt was sent, this one stays as its successor found it.
        .where((eb) =>
          eb.not(
            eb.exists(
              eb
                .selectFrom('delivery_attempts as later')
                .select('later.attempt')
                .whereRef('later.delivery_id', '=', 'v.delivery_id')
                .where(sql<boolean>`(later.series, later.attempt) > (a.series, v.attempt)`)
                .where('later.dispatched_at', 'is not', null),
            ),
          ),
        )
        .returning(['a.delivery_id', 'a.series', 'a.attempt', 'a.response_status', 'a.error']),
    )
    .with('recorded', (w) =>
      w
        .updateTable('webhook_deliveries')
        .from('closed')
        .set({
          status: sql<DeliveryStatus>`case when closed.error is null then 'delivered' else 'retrying' end`,
          attempt_count: sql<number>`closed.attempt`,
          last_error: sql<string | null>`closed.error`,
          last_response_status: sql<number | null>`closed.response_status`,
          delivered_at: sql<Date | null>`case when closed.error is null then ${p.now}::timestamptz else webhook_deliveries.delivered_at end`,
          next_attempt_at: sql<Date | null>`case when closed.error is null or closed.attempt >= ${MAX_ATTEMPTS} then null else ${p.next}::timestamptz end`,
          lease_until: null,
          lease_owner: null,
          updated_at: p.now,
        })
        .whereRef('webhook_deliveries.id', '=', 'closed.delivery_id')
        .whereRef('webhook_deliveries.series', '=', 'closed.series')
        .where('webhook_deliveries.status', 'in', OPEN_STATUSES)
        .returning('webhook_deliveries.id'),
    )
    .selectFrom('closed')
    .select('closed.delivery_id');
}

/** True while a kill switch stops the organization, or its customer has paused the endpoint, whose ids the expressions name. */
function stoppedBy(organizationId: Expression<string>, endpointId: Expression<string>) {
  return sql<boolean>`(exists (select 1 from kill_switches k where k.enabled and k.scope in (${GLOBAL_SCOPE}, ${organizationId}::text))
    or exists (select 1 from webhook_endpoints p where p.id = ${endpointId} and p.paused_at is not null))`;
}

const listedColumns = [
  'w.id as id',
  'w.endpoint_id as endpointId',
  'w.event_id as eventId',
  'w.event_type as eventType',
  'w.status as status',
  'w.attempt_count as attemptCount',
  epochMs<number | null>('w.next_attempt_at').as('nextAttemptAtMs'),
  'w.last_error as lastError',
  'w.last_response_status as lastResponseStatus',
  'w.workflow_id as workflowId',
  epochMs<number | null>('w.delivered_at').as('deliveredAtMs'),
  epochMs('w.created_at').as('createdAtMs'),
  epochMs('w.updated_at').as('updatedAtMs'),
  'w.series as series',
] as const;

/** The newest deliveries of each of the endpoints, newest first (see listRecent). */
function recentDeliveriesQuery(k: Kysely<Tables>, endpointIds: string[]) {
  return k
    .selectFrom('webhook_endpoints as e')
    .innerJoinLateral(
      (eb) =>
        eb
          .selectFrom('webhook_deliveries as w')
          .select(listedColumns)
          .select('w.created_at as sortAt')
          .whereRef('w.endpoint_id', '=', 'e.id')
          .orderBy('w.created_at', 'desc')
          .orderBy('w.id', 'desc')
          .limit(RECENT_DELIVERIES)
          .as('d'),
      (join) => join.onTrue(),
    )
    .selectAll('d')
    .where(sql<boolean>`e.id = any(${endpointIds}::uuid[])`)
    .orderBy('d.endpointId')
    .orderBy('d.sortAt', 'desc')
    .orderBy('d.id', 'desc');
}

function windowQuery(k: Kysely<Tables>, window: DeliveryWindow, statuses: readonly DeliveryStatus[]) {
  return k
    .selectFrom('webhook_deliveries as w')
    .where('w.endpoint_id', '=', window.endpointId)
    .where('w.organization_id', '=', window.organizationId)
    .where('w.status', 'in', statuses)
    .where('w.created_at', '>=', window.since)
    .where('w.created_at', '<', window.until);
}

function listedQuery(k: Kysely<Tables>) {
  return k.selectFrom('webhook_deliveries as w').select(listedColumns);
}
