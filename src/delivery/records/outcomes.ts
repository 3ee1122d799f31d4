import { sql, type Expression, type Kysely } from 'kysely';
import { CompiledStatement, RESPONSE_EXCERPT_LENGTH, type AttemptErrorClass, type DeliveryStatus, type EntityManager } from '../../db';
import { MAX_ATTEMPTS } from '../../../workflows/policy';
import type { DeliveryRef } from '../contract';
import { db, INTERRUPTED_ATTEMPT, OPEN_STATUSES, stoppedBy, type RecordsContext, type Tables } from './rows';

/**
 * How a begun attempt and its delivery end: the dispatch mark that makes an attempt count,
 * the outcome that closes it (delivered, or retrying one interval later), and the writes
 * that end or pause a delivery without an attempt (hold, fail, deadLetter). The dispatch
 * marks and outcomes of concurrent attempts are written together, one statement each
 * (group-commit.ts batches them), compiled once. Methods of DeliveryRecords (index.ts).
 */

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
  /** The wait a 429 or 503 asked for (Retry-After), in seconds; null (or absent) otherwise. */
  retryAfterSeconds?: number | null;
}

/** What recordOutcomes wrote of one attempt. */
export type RecordedOutcome =
  | { kind: 'delivered'; sent: number }
  /** A failed attempt; after the last one (`exhausted`) the delivery is dead-lettered already, by the same statement. */
  | { kind: 'retrying'; sent: number; exhausted: boolean }
  /** Another executor had already closed this attempt and gone on; nothing was written. */
  | { kind: 'superseded' };

const dispatch = new CompiledStatement(dispatchStatement, { prepare: true });
const outcome = new CompiledStatement(outcomeStatement, { prepare: true });

export const outcomeMethods = {
  /**
   * The connection to the receiver stands and the request is about to be written: from
   * here on the attempt counts. Refused (false) when a kill switch came on (or the endpoint
   * was paused) meanwhile, the delivery finished, or another executor took the attempt over;
   * then nothing is sent. Attempts of several deliveries (one each) go in one statement:
   * what a group commit of concurrent attempts writes. One answer per attempt, in their order.
   */
  async markAllDispatched(this: RecordsContext, em: EntityManager, attempts: AttemptKey[]): Promise<boolean[]> {
    const rows = await dispatch.execute(db(em), { now: new Date(this.schedule.now()), ...attemptColumns(attempts) });
    const counted = new Set(rows.map((r) => r.id));
    return attempts.map((a) => counted.has(a.ref.deliveryId));
  },

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
  async recordOutcomes(this: RecordsContext, em: EntityManager, outcomes: AttemptResultRecord[]): Promise<RecordedOutcome[]> {
    const now = new Date(this.schedule.now());
    const rows = await outcome.execute(db(em), {
      now,
      next: new Date(now.getTime() + this.schedule.retryIntervalMs),
      ...attemptColumns(outcomes),
      status: outcomes.map((o) => o.status),
      error: outcomes.map((o) => o.error),
      errorClass: outcomes.map((o) => o.errorClass ?? null),
      excerpt: outcomes.map((o) => o.excerpt?.slice(0, RESPONSE_EXCERPT_LENGTH) ?? null),
      retryAfter: outcomes.map((o) => o.retryAfterSeconds ?? null),
    });
    const closed = new Set(rows.map((r) => r.delivery_id));
    return outcomes.map((o): RecordedOutcome => {
      if (!closed.has(o.ref.deliveryId)) return { kind: 'superseded' };
      return o.error === null ? { kind: 'delivered', sent: o.attempt } : { kind: 'retrying', sent: o.attempt, exhausted: o.attempt >= MAX_ATTEMPTS };
    });
  },

  /** A kill switch is on or the endpoint paused: the delivery (an open one only) waits one interval (or until released) without using an attempt. */
  async hold(this: RecordsContext, em: EntityManager, ref: DeliveryRef): Promise<void> {
    const now = new Date(this.schedule.now());
    await db(em)
      .updateTable('webhook_deliveries')
      .set(heldColumns(now, new Date(now.getTime() + this.schedule.retryIntervalMs)))
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  },

  /** The endpoint is missing or disabled: the delivery (an open one only) fails at once with the reason, never retried. */
  async fail(this: RecordsContext, em: EntityManager, ref: DeliveryRef, reason: string): Promise<void> {
    await db(em)
      .updateTable('webhook_deliveries')
      .set(failedColumns(new Date(this.schedule.now()), reason))
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  },

  /**
   * All attempts are used: the delivery is dead-lettered and queued for operators. False
   * when it had already finished. `reason`: a failure of ours ended it (not the receiver's);
   * it becomes the last error, and an attempt begun but never sent is closed with it, so it
   * never reads as a request that was made. `workflowId`: the workflow that asks; a delivery
   * whose row names another (a resend started a series of its own since this one ended) is
   * left as it is, so a series' dead letter that comes late never ends the next. The
   * delivery's row, that attempt's and the dead letter are written in one transaction.
   */
  async deadLetter(this: RecordsContext, em: EntityManager, ref: DeliveryRef, options: { reason?: string; workflowId?: string } = {}): Promise<boolean> {
    const { reason, workflowId } = options;
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.schedule.now());
      const updated = await k
        .updateTable('webhook_deliveries')
        .set({ status: 'dead_lettered', next_attempt_at: null, lease_until: null, lease_owner: null, updated_at: now, ...(reason !== undefined && { last_error: reason }) })
        .where('id', '=', ref.deliveryId)
        .where('organization_id', '=', ref.organizationId)
        .where('status', 'in', OPEN_STATUSES)
        .$if(workflowId !== undefined, (q) => q.where('workflow_id', '=', workflowId!))
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
  },
};

/** A delivery held by a kill switch until `until` (or its release): what hold and beginAttempt write. */
export function heldColumns(now: Date, until: Date) {
  return { status: 'held', next_attempt_at: until, lease_until: null, lease_owner: null, updated_at: now } as const;
}

/** A delivery failed for good, with its reason: what fail and beginAttempt write. */
export function failedColumns(now: Date, reason: string | Expression<string>) {
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
    retry_after_seconds: number | null;
  }>`(select * from unnest(
    ${p.ids}::uuid[], ${p.attempts}::int[], ${p.starts}::timestamptz[], ${p.status}::int[], ${p.error}::text[], ${p.errorClass}::text[], ${p.excerpt}::text[], ${p.retryAfter}::int[]
  ) as v(delivery_id, attempt, started_at, response_status, error, error_class, response_excerpt, retry_after_seconds))`.as('v');
}

/** Attempt results column by column (recordOutcomes). */
type AttemptResultColumns = AttemptColumns & {
  status: (number | null)[];
  error: (string | null)[];
  errorClass: (AttemptErrorClass | null)[];
  excerpt: (string | null)[];
  retryAfter: (number | null)[];
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
              .where((s) => s.not(stoppedBy(s.ref('d.organization_id'), s.ref('d.endpoint_id'), s.ref('d.event_type')))),
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
          retry_after_seconds: sql<number | null>`v.retry_after_seconds`,
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
          // The last attempt's failure dead-letters the delivery in this statement: it never reads
          // `retrying` while the dead-letter step is on its way (a workflow task away on Temporal).
          status: sql<DeliveryStatus>`case when closed.error is null then 'delivered' when closed.attempt >= ${MAX_ATTEMPTS} then 'dead_lettered' else 'retrying' end`,
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
        .returning(['webhook_deliveries.id', 'webhook_deliveries.organization_id', 'webhook_deliveries.endpoint_id', 'webhook_deliveries.status', 'webhook_deliveries.last_error']),
    )
    .with('queued', (w) =>
      w
        .insertInto('dead_letters')
        .columns(['delivery_id', 'organization_id', 'endpoint_id', 'last_error', 'created_at'])
        .expression((eb) =>
          eb
            .selectFrom('recorded')
            .select(['recorded.id', 'recorded.organization_id', 'recorded.endpoint_id', 'recorded.last_error', sql<Date>`${p.now}::timestamptz`.as('created_at')])
            .where('recorded.status', '=', 'dead_lettered'),
        )
        .onConflict((oc) => oc.column('delivery_id').doNothing()),
    )
    .selectFrom('closed')
    .select('closed.delivery_id');
}
