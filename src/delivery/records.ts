import { randomUUID } from 'node:crypto';
import { sql, type CompiledQuery, type Expression, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { EntityManager, DeadLetterSchema, DeliveryAttemptSchema, DeliveryStatus, KillSwitchSchema, WebhookDeliverySchema, WebhookEndpointSchema } from '../db';
import { MAX_ATTEMPTS, RETRY_INTERVAL_MS } from '../../workflows/policy';
import type { DeliveryRef } from './contract';
import { DELIVERY_WORKFLOW_ID_PREFIX } from './workflow-id';

/**
 * Timestamps are read as epoch milliseconds (epochMs): the driver hands timestamptz columns
 * to MikroORM as text, and a number typed in SQL cannot be mistaken for a Date.
 *
 * The only code that reads or writes delivery rows, their attempts, the dead-letter queue
 * and the kill switches. Each transition of a delivery is one named method here; both
 * engines and every service go through them, so the state machine lives in one file.
 *
 *   pending/retrying/held ──claimDue──► (leased) ──beginAttempt──► send | held | failed | exhausted
 *   send ──markDispatched──► (counted) ──recordOutcome──► delivered | retrying | (8th) → deadLetter
 *   held ──releaseHeld──► due now
 *
 * An attempt counts (attempt_count) once its request may have reached the receiver, or
 * once it failed on the receiver's side of the network (DNS, connect, TLS): never for a
 * failure of ours (PostgreSQL unreachable, a worker that died before sending).
 */

/** Statuses in which a delivery still has work to do. */
export const OPEN_STATUSES = ['pending', 'retrying', 'held'] as const satisfies readonly DeliveryStatus[];
/** Statuses a delivery never leaves. */
export const FINAL_STATUSES = ['delivered', 'dead_lettered', 'failed'] as const satisfies readonly DeliveryStatus[];

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

/** One event to record for every endpoint of its organization subscribed to its type. */
export interface FannedOutEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  /** The exact JSON body signed and sent on every attempt; the same for every endpoint. */
  payload: string;
}

/** A delivery of an event, with the URL of its endpoint (engines name the host to operators). */
export interface EventDelivery extends ListedDelivery {
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
    }
  | { kind: 'delivered'; attempt: number; status: number }
  | { kind: 'gone'; reason: string }
  | { kind: 'held'; sent: number }
  | { kind: 'exhausted'; sent: number }
  /** An attempt of a worker that died after sending was closed as failed; the next one is due then. */
  | { kind: 'wait'; until: Date; sent: number };

/** What recordOutcome wrote. */
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
  attempt: number;
  startedAt: Date;
  dispatchedAt: Date | null;
  finishedAt: Date | null;
  responseStatus: number | null;
  error: string | null;
}

export interface DeliveryView extends ListedDelivery {
  organizationId: string;
  attempts: AttemptView[];
  deadLetteredAt: Date | null;
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

/** Epoch milliseconds, truncated as a JavaScript Date truncates microseconds; a list carries up to 250 deliveries, so no Date is built only to be taken apart again. */
const epochMs = <T extends number | null = number>(column: string) => sql<T>`floor(extract(epoch from ${sql.ref(column)}) * 1000)::float8`;

export class DeliveryRecords {
  private readonly now: () => number;
  private readonly interval: number;
  private recentQuery: CompiledQuery<RecentDelivery> | undefined;

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

  /** Active endpoints of the organization subscribed to the event type: how many deliveries a fan-out records. */
  async subscriberCount(em: EntityManager, organizationId: string, eventType: string): Promise<number> {
    const row = await subscribers(db(em), organizationId, eventType)
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /**
   * Records an event's deliveries to every active endpoint of its organization subscribed
   * to its type in one statement, however many there are. The first `sendable` (oldest
   * endpoints first) are pending and due now; the others are recorded failed with
   * `refusal` (over the monthly quota, say), so none is silently dropped. A delivery that
   * exists already for (endpoint, event id) stays as it is.
   */
  async recordForSubscribers(em: EntityManager, event: FannedOutEvent, options: { sendable: number; refusal: string }): Promise<void> {
    const now = new Date(this.now());
    // workflowIdFor's id, built in SQL: a uuid's text is unchanged by encodeURIComponent.
    const head = `${DELIVERY_WORKFLOW_ID_PREFIX}/${encodeURIComponent(event.organizationId)}/`;
    const tail = `/${encodeURIComponent(event.eventId)}`;
    const k = db(em);
    const sendable = sql<boolean>`s.n <= ${options.sendable}`;
    await k
      .insertInto('webhook_deliveries')
      .columns(['id', 'organization_id', 'endpoint_id', 'event_id', 'event_type', 'payload', 'status', 'attempt_count', 'next_attempt_at', 'last_error', 'workflow_id', 'created_at', 'updated_at'])
      .expression(
        k
          .selectFrom(
            subscribers(k, event.organizationId, event.eventType)
              .select(['e.id', sql<number>`row_number() over (order by e.created_at, e.id)`.as('n')])
              .as('s'),
          )
          .select([
            sql<string>`gen_random_uuid()`.as('id'),
            sql<string>`${event.organizationId}::uuid`.as('organization_id'),
            's.id as endpoint_id',
            sql<string>`${event.eventId}::text`.as('event_id'),
            sql<string>`${event.eventType}::text`.as('event_type'),
            sql<string>`${event.payload}::text`.as('payload'),
            sql<DeliveryStatus>`case when ${sendable} then 'pending' else 'failed' end`.as('status'),
            sql<number>`0`.as('attempt_count'),
            sql<Date | null>`case when ${sendable} then ${now}::timestamptz end`.as('next_attempt_at'),
            sql<string | null>`case when ${sendable} then null else ${options.refusal}::text end`.as('last_error'),
            sql<string>`${head}::text || s.id::text || ${tail}::text`.as('workflow_id'),
            sql<Date>`${now}::timestamptz`.as('created_at'),
            sql<Date>`${now}::timestamptz`.as('updated_at'),
          ]),
      )
      .onConflict((oc) => oc.columns(['endpoint_id', 'event_id']).doNothing())
      .execute();
  }

  /** Every delivery of one event of an organization, oldest first, with its endpoint's URL. */
  async listByEvent(em: EntityManager, organizationId: string, eventId: string): Promise<EventDelivery[]> {
    return listedQuery(db(em))
      .innerJoin('webhook_endpoints as e', 'e.id', 'w.endpoint_id')
      .select('e.url as endpointUrl')
      .where('w.organization_id', '=', organizationId)
      .where('w.event_id', '=', eventId)
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
    const k = db(em);
    // Built and compiled once: building this query's tree (a lateral join of 13 columns)
    // on every list call was about 6% of the call's CPU. The ids are its one varying value.
    this.recentQuery ??= recentDeliveriesQuery(k, ENDPOINT_IDS).compile();
    const query = this.recentQuery;
    const forThisPage: CompiledQuery<RecentDelivery> = { ...query, parameters: query.parameters.map((p) => (p === ENDPOINT_IDS ? endpointIds : p)) };
    const { rows } = await k.executeQuery(forThisPage);
    for (const { sortAt: _, ...row } of rows) byEndpoint.get(row.endpointId)?.push(row);
    return byEndpoint;
  }

  /**
   * Embedded engine: leases up to `limit` due deliveries to `owner`, oldest due first,
   * skipping rows another instance is claiming right now and the ones this instance is
   * already working on.
   */
  async claimDue(em: EntityManager, options: { owner: string; limit: number; leaseMs: number; busy: string[] }): Promise<DeliveryRef[]> {
    if (options.limit <= 0) return [];
    const now = new Date(this.now());
    const k = db(em);
    const rows = await k
      .updateTable('webhook_deliveries')
      .set({ lease_until: new Date(now.getTime() + options.leaseMs), lease_owner: options.owner })
      .where('id', 'in', (eb) => {
        let due = eb
          .selectFrom('webhook_deliveries')
          .select('id')
          .where('status', 'in', OPEN_STATUSES)
          .where('next_attempt_at', '<=', now)
          .where((w) => w.or([w('lease_until', 'is', null), w('lease_until', '<', now)]));
        if (options.busy.length > 0) due = due.where('id', 'not in', options.busy);
        return due.orderBy('next_attempt_at').limit(options.limit).forUpdate().skipLocked();
      })
      .returning(['id', 'organization_id', 'endpoint_id', 'event_id'])
      .execute();
    return rows.map((r) => ({ deliveryId: r.id, organizationId: r.organization_id, endpointId: r.endpoint_id, eventId: r.event_id }));
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

  /** Embedded engine: gives a lease back (a step that ended without an outcome, say). */
  async releaseLease(em: EntityManager, deliveryId: string, owner: string): Promise<void> {
    await db(em)
      .updateTable('webhook_deliveries')
      .set({ lease_until: null, lease_owner: null })
      .where('id', '=', deliveryId)
      .where('lease_owner', '=', owner)
      .execute();
  }

  /**
   * Starts an attempt. Under a lock on the delivery row, decides what the attempt may do:
   * a finished delivery stays finished; a missing or disabled endpoint fails it; a kill
   * switch holds it without using an attempt; otherwise the next attempt row is written
   * (or the one a dead worker wrote but never sent is taken over) and the caller sends.
   */
  async beginAttempt(em: EntityManager, ref: DeliveryRef): Promise<AttemptStart> {
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.now());
      const row = await k
        .selectFrom('webhook_deliveries as d')
        .leftJoin('webhook_endpoints as e', (join) => join.onRef('e.id', '=', 'd.endpoint_id').onRef('e.organization_id', '=', 'd.organization_id'))
        .select([
          'd.status',
          'd.attempt_count',
          'd.last_response_status',
          'd.payload',
          'e.id as endpoint_id',
          'e.url',
          'e.disabled_at',
          'e.secret_key_id',
          'e.secret_ciphertext',
        ])
        .select((eb) => stoppedBy(eb.ref('d.organization_id')).as('stopped'))
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
        .where('finished_at', 'is', null)
        .where('dispatched_at', 'is not', null)
        .executeTakeFirst();
      if (open) {
        // Its executor died (or lost its lease) after sending: the receiver may have it, so it counts.
        sent = Math.max(sent, open.attempt);
        await k
          .updateTable('delivery_attempts')
          .set({ finished_at: now, error: INTERRUPTED_ATTEMPT })
          .where('delivery_id', '=', ref.deliveryId)
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
        const reason = row.endpoint_id ? 'The endpoint is disabled.' : 'The endpoint no longer exists.';
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
        .values({ delivery_id: ref.deliveryId, attempt, started_at: now })
        .onConflict((oc) =>
          oc
            .columns(['delivery_id', 'attempt'])
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
      };
    });
  }

  /**
   * The connection to the receiver stands and the request is about to be written: from
   * here on the attempt counts. Refused (false) when a kill switch came on meanwhile, the
   * delivery finished, or another executor took the attempt over; then nothing is sent.
   */
  async markDispatched(em: EntityManager, ref: DeliveryRef, attempt: number, startedAt: Date): Promise<boolean> {
    const now = new Date(this.now());
    const k = db(em);
    const result = await k
      .with('marked', (w) =>
        w
          .updateTable('delivery_attempts as a')
          .set({ dispatched_at: now })
          .where('a.delivery_id', '=', ref.deliveryId)
          .where('a.attempt', '=', attempt)
          .where('a.started_at', '=', startedAt)
          .where('a.dispatched_at', 'is', null)
          .where('a.finished_at', 'is', null)
          .where((eb) =>
            eb.exists(
              eb
                .selectFrom('webhook_deliveries as d')
                .select('d.id')
                .where('d.id', '=', ref.deliveryId)
                .where('d.status', 'in', OPEN_STATUSES)
                .where((s) => s.not(stoppedBy(s.ref('d.organization_id')))),
            ),
          )
          .returning('a.attempt'),
      )
      .updateTable('webhook_deliveries')
      .set({ attempt_count: attempt, updated_at: now })
      .where('id', '=', ref.deliveryId)
      .where((eb) => eb.exists(eb.selectFrom('marked').select('attempt')))
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /**
   * Writes an attempt's result: delivered, or retrying with the next attempt one interval
   * later (none after the last). Counted attempts only: a failure before anything reached
   * the receiver's network is not an attempt and is never recorded here. Idempotent: an
   * attempt another executor already closed as interrupted takes this real outcome instead,
   * unless a later attempt was sent meanwhile.
   */
  async recordOutcome(
    em: EntityManager,
    ref: DeliveryRef,
    attempt: number,
    startedAt: Date,
    outcome: { status: number | null; error: string | null },
  ): Promise<RecordedOutcome> {
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.now());
      // Looked at before closing: once a later attempt was sent, this one stays as its successor found it.
      const later = await k
        .selectFrom('delivery_attempts')
        .select('attempt')
        .where('delivery_id', '=', ref.deliveryId)
        .where('attempt', '>', attempt)
        .where('dispatched_at', 'is not', null)
        .executeTakeFirst();
      if (later) return { kind: 'superseded' };
      const closed = await k
        .updateTable('delivery_attempts')
        .set({ finished_at: now, response_status: outcome.status, error: outcome.error })
        .where('delivery_id', '=', ref.deliveryId)
        .where('attempt', '=', attempt)
        .where('started_at', '=', startedAt)
        .where((eb) => eb.or([eb('finished_at', 'is', null), eb('error', '=', INTERRUPTED_ATTEMPT)]))
        .executeTakeFirst();
      if (Number(closed.numUpdatedRows) === 0) return { kind: 'superseded' };

      const done = { lease_until: null, lease_owner: null, updated_at: now, last_response_status: outcome.status };
      if (outcome.error === null) {
        await k
          .updateTable('webhook_deliveries')
          .set({ ...done, status: 'delivered', attempt_count: attempt, delivered_at: now, last_error: null, next_attempt_at: null })
          .where('id', '=', ref.deliveryId)
          .where('status', 'in', OPEN_STATUSES)
          .execute();
        return { kind: 'delivered', sent: attempt };
      }
      const exhausted = attempt >= MAX_ATTEMPTS;
      await k
        .updateTable('webhook_deliveries')
        .set({
          ...done,
          status: 'retrying',
          attempt_count: attempt,
          last_error: outcome.error,
          next_attempt_at: exhausted ? null : new Date(now.getTime() + this.interval),
        })
        .where('id', '=', ref.deliveryId)
        .where('status', 'in', OPEN_STATUSES)
        .execute();
      return { kind: 'retrying', sent: attempt, exhausted };
    });
  }

  /** A kill switch is on: the delivery waits one interval (or until released) without using an attempt. */
  async hold(em: EntityManager, ref: DeliveryRef): Promise<void> {
    const now = new Date(this.now());
    await db(em)
      .updateTable('webhook_deliveries')
      .set({ status: 'held', next_attempt_at: new Date(now.getTime() + this.interval), lease_until: null, lease_owner: null, updated_at: now })
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  }

  /** The endpoint is missing or disabled: the delivery fails at once with the reason, never retried. */
  async fail(em: EntityManager, ref: DeliveryRef, reason: string): Promise<void> {
    const now = new Date(this.now());
    await db(em)
      .updateTable('webhook_deliveries')
      .set({ status: 'failed', last_error: reason, next_attempt_at: null, lease_until: null, lease_owner: null, updated_at: now })
      .where('id', '=', ref.deliveryId)
      .where('status', 'in', OPEN_STATUSES)
      .execute();
  }

  /** All attempts are used: the delivery is dead-lettered and queued for operators. False when it had already finished. */
  async deadLetter(em: EntityManager, ref: DeliveryRef): Promise<boolean> {
    return em.transactional(async (tx) => {
      const k = db(tx);
      const now = new Date(this.now());
      const updated = await k
        .updateTable('webhook_deliveries')
        .set({ status: 'dead_lettered', next_attempt_at: null, lease_until: null, lease_owner: null, updated_at: now })
        .where('id', '=', ref.deliveryId)
        .where('organization_id', '=', ref.organizationId)
        .where('status', 'in', OPEN_STATUSES)
        .returning('last_error')
        .executeTakeFirst();
      if (!updated) return false;
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
    const now = new Date(this.now());
    let q = db(em).updateTable('webhook_deliveries').set({ next_attempt_at: now, updated_at: now }).where('status', '=', 'held');
    if (scope !== GLOBAL_SCOPE) q = q.where('organization_id', '=', scope);
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
  async pendingSince(em: EntityManager, cutoff: Date, limit: number): Promise<(DeliveryRef & { eventType: string; url: string })[]> {
    const rows = await db(em)
      .selectFrom('webhook_deliveries as d')
      .innerJoin('webhook_endpoints as e', 'e.id', 'd.endpoint_id')
      .select(['d.id', 'd.organization_id', 'd.endpoint_id', 'd.event_id', 'd.event_type', 'e.url'])
      .where('d.status', '=', 'pending')
      .where('d.created_at', '<', cutoff)
      .orderBy('d.created_at')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ deliveryId: r.id, organizationId: r.organization_id, endpointId: r.endpoint_id, eventId: r.event_id, eventType: r.event_type, url: r.url }));
  }

  /** A delivery with every attempt, for operators: by id, or by endpoint and event id. */
  async lookup(em: EntityManager, by: { deliveryId: string } | { endpointId: string; eventId: string }): Promise<DeliveryView | null> {
    let q = db(em).selectFrom('webhook_deliveries as w').select(listedColumns).select('w.organization_id as organizationId');
    q = 'deliveryId' in by ? q.where('w.id', '=', by.deliveryId) : q.where('w.endpoint_id', '=', by.endpointId).where('w.event_id', '=', by.eventId);
    const delivery = await q.executeTakeFirst();
    if (!delivery) return null;
    const [attempts, dead] = await Promise.all([
      db(em)
        .selectFrom('delivery_attempts')
        .select([
          'attempt',
          epochMs('started_at').as('startedAtMs'),
          epochMs<number | null>('dispatched_at').as('dispatchedAtMs'),
          epochMs<number | null>('finished_at').as('finishedAtMs'),
          'response_status',
          'error',
        ])
        .where('delivery_id', '=', delivery.id)
        .orderBy('attempt')
        .execute(),
      db(em).selectFrom('dead_letters').select(epochMs('created_at').as('atMs')).where('delivery_id', '=', delivery.id).executeTakeFirst(),
    ]);
    return {
      ...delivery,
      attempts: attempts.map((a) => ({
        attempt: a.attempt,
        startedAt: new Date(a.startedAtMs),
        dispatchedAt: a.dispatchedAtMs === null ? null : new Date(a.dispatchedAtMs),
        finishedAt: a.finishedAtMs === null ? null : new Date(a.finishedAtMs),
        responseStatus: a.response_status,
        error: a.error,
      })),
      deadLetteredAt: dead ? new Date(dead.atMs) : null,
    };
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

/** True while a kill switch stops the organization whose id the expression names. */
function stoppedBy(organizationId: Expression<string>) {
  return sql<boolean>`exists (select 1 from kill_switches k where k.enabled and k.scope in (${GLOBAL_SCOPE}, ${organizationId}::text))`;
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
] as const;

/** Stands for the page's endpoint ids in the compiled listRecent query; replaced by identity. */
const ENDPOINT_IDS: string[] = [];

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
type RecentDelivery = Awaited<ReturnType<ReturnType<typeof recentDeliveriesQuery>['execute']>>[number];

/** Active endpoints of an organization whose event names include the type. */
function subscribers(k: Kysely<Tables>, organizationId: string, eventType: string) {
  return k
    .selectFrom('webhook_endpoints as e')
    .where('e.organization_id', '=', organizationId)
    .where('e.disabled_at', 'is', null)
    .where(sql<boolean>`${eventType}::text = any(e.event_names)`);
}

function listedQuery(k: Kysely<Tables>) {
  return k.selectFrom('webhook_deliveries as w').select(listedColumns);
}
