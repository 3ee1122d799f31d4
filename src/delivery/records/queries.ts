import { sql, type Kysely } from 'kysely';
import { CompiledStatement, epochMs, type AttemptErrorClass, type DeliveryStatus, type EntityManager } from '../../db';
import type { DeliveryRef } from '../contract';
import { db, listedColumns, listedQuery, OPEN_STATUSES, recordedColumns, type ListedDelivery, type RecordsContext, type Tables } from './rows';

/**
 * What the records answer without writing: the deliveries of events, of endpoints (the
 * newest, the log, a recovery's window), one delivery with its attempts, the dead-letter
 * queue, and the figures the metrics and the pending sweep read. Methods of DeliveryRecords
 * (index.ts).
 */

/** Delivery rows as the list route shows them: the five newest per endpoint. */
export const RECENT_DELIVERIES = 5;

/** A delivery of an event, with the URL of its endpoint (engines name the host to operators). */
export interface EventDelivery extends ListedDelivery {
  organizationId: string;
  endpointUrl: string;
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
  /** What a 429 or 503 asked for in its Retry-After header, in seconds. */
  retryAfterSeconds: number | null;
}

export interface DeliveryView extends ListedDelivery {
  organizationId: string;
  /** The exact body signed and sent on every attempt; empty once removed (payloadRemoved says why). */
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

// Building the lateral join's tree on every list call was about 6% of the call's CPU; prepared, it is planned once per connection.
const recent = new CompiledStatement((k: Kysely<Tables>, p: { endpointIds: string[] }) => recentDeliveriesQuery(k, p.endpointIds), { prepare: true });

export const queryMethods = {
  /** Every delivery of the given events, each event's oldest endpoint first, with its endpoint's URL. */
  async listByEvents(this: RecordsContext, em: EntityManager, events: { organizationId: string; eventId: string }[]): Promise<EventDelivery[]> {
    if (events.length === 0) return [];
    // As a publish answers them (recordedColumns), so that a publish's answer and a lookup of the same event agree.
    return db(em)
      .selectFrom('webhook_deliveries as w')
      .select(recordedColumns)
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
  },

  /**
   * The newest deliveries (RECENT_DELIVERIES) of many endpoints in one query, whatever
   * their history: a lateral join walks the (endpoint_id, created_at desc) index for each
   * endpoint and stops after five. The ids are the organization's own (the caller read
   * them scoped to it).
   */
  async listRecent(this: RecordsContext, em: EntityManager, endpointIds: string[]): Promise<Map<string, ListedDelivery[]>> {
    const byEndpoint = new Map<string, ListedDelivery[]>(endpointIds.map((id) => [id, []]));
    if (endpointIds.length === 0) return byEndpoint;
    const rows = await recent.execute(db(em), { endpointIds });
    for (const { sortAt: _, ...row } of rows) byEndpoint.get(row.endpointId)?.push(row);
    return byEndpoint;
  },

  /**
   * An endpoint's delivery log, newest first (created_at, then id, both descending), read
   * along the (endpoint_id, created_at desc, id desc) index; `before` continues after the
   * last delivery of the previous page.
   */
  async listForEndpoint(this: RecordsContext, em: EntityManager, filter: DeliveryLogFilter): Promise<ListedDelivery[]> {
    let q = listedQuery(db(em)).where('w.endpoint_id', '=', filter.endpointId).where('w.organization_id', '=', filter.organizationId);
    if (filter.statuses && filter.statuses.length > 0) q = q.where('w.status', 'in', filter.statuses);
    if (filter.eventType) q = q.where('w.event_type', '=', filter.eventType);
    if (filter.since) q = q.where('w.created_at', '>=', filter.since);
    if (filter.until) q = q.where('w.created_at', '<', filter.until);
    const before = filter.before;
    if (before) q = q.where((eb) => eb(eb.refTuple('w.created_at', 'w.id'), '<', eb.tuple(before.at, before.id)));
    return q.orderBy('w.created_at', 'desc').orderBy('w.id', 'desc').limit(filter.limit).execute();
  },

  /** A delivery with every attempt, for operators: by id, or by endpoint and event id. */
  async lookup(this: RecordsContext, em: EntityManager, by: { deliveryId: string } | { endpointId: string; eventId: string }): Promise<DeliveryView | null> {
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
          'retry_after_seconds',
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
        retryAfterSeconds: a.retry_after_seconds,
      })),
      deadLetteredAt: dead ? new Date(dead.atMs) : null,
    };
  },

  /** How many of an endpoint's deliveries recorded in [since, until) are in one of `statuses`. */
  async countInWindow(this: RecordsContext, em: EntityManager, window: DeliveryWindow, statuses: readonly DeliveryStatus[]): Promise<number> {
    const row = await windowQuery(db(em), window, statuses)
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  },

  /** The next `limit` of an endpoint's deliveries in [since, until) in one of `statuses`, oldest first, after `after`. */
  async nextInWindow(
    this: RecordsContext,
    em: EntityManager,
    window: DeliveryWindow,
    statuses: readonly DeliveryStatus[],
    after: { at: Date; id: string } | null,
    limit: number,
  ): Promise<{ id: string; createdAtMs: number }[]> {
    let q = windowQuery(db(em), window, statuses).select(['w.id', epochMs('w.created_at').as('createdAtMs')]);
    if (after) q = q.where((eb) => eb(eb.refTuple('w.created_at', 'w.id'), '>', eb.tuple(after.at, after.id)));
    return q.orderBy('w.created_at').orderBy('w.id').limit(limit).execute();
  },

  /** The dead-letter queue, newest first. */
  async listDeadLetters(this: RecordsContext, em: EntityManager, filter: DeadLetterFilter): Promise<DeadLetterView[]> {
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
  },

  /** Deliveries in the dead-letter queue. */
  async deadLetterCount(this: RecordsContext, em: EntityManager): Promise<number> {
    const row = await db(em).selectFrom('dead_letters').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    return Number(row.n);
  },

  /** Seconds the oldest due delivery has waited (0 when none is due): how far the engine is behind. */
  async lagSeconds(this: RecordsContext, em: EntityManager): Promise<number> {
    const now = this.schedule.now();
    const row = await db(em)
      .selectFrom('webhook_deliveries')
      .select(sql<number | null>`floor(extract(epoch from min(next_attempt_at)) * 1000)::float8`.as('dueMs'))
      .where('status', 'in', OPEN_STATUSES)
      .where('next_attempt_at', '<=', new Date(now))
      .executeTakeFirst();
    return row?.dueMs ? Math.max(0, (now - row.dueMs) / 1000) : 0;
  },

  /**
   * Temporal: deliveries still pending since before `cutoff` (their start may have failed),
   * oldest first, `limit` of them after `after` (keyset: a page never repeats one).
   */
  async pendingSince(this: RecordsContext, em: EntityManager, cutoff: Date, limit: number, after?: PendingCursor): Promise<PendingDelivery[]> {
    const rows = await db(em)
      .selectFrom('webhook_deliveries as d')
      .innerJoin('webhook_endpoints as e', 'e.id', 'd.endpoint_id')
      .select(['d.id', 'd.organization_id', 'd.endpoint_id', 'd.event_id', 'd.event_type', 'e.url', 'd.series', 'd.created_at'])
      .where('d.status', '=', 'pending')
      .where('d.created_at', '<', cutoff)
      .$if(after !== undefined, (q) => q.where(sql<boolean>`(d.created_at, d.id) > (${after!.createdAt}::timestamptz, ${after!.deliveryId}::uuid)`))
      .orderBy('d.created_at')
      .orderBy('d.id')
      .limit(limit)
      .execute();
    return rows.map((r) => ({
      deliveryId: r.id,
      organizationId: r.organization_id,
      endpointId: r.endpoint_id,
      eventId: r.event_id,
      eventType: r.event_type,
      url: r.url,
      series: r.series,
      createdAt: r.created_at,
    }));
  },
};

/** A place in the pending rows, in the order pendingSince reads them. */
export interface PendingCursor {
  createdAt: Date;
  deliveryId: string;
}

export type PendingDelivery = DeliveryRef & { eventType: string; url: string; series: number; createdAt: Date };

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
    // A delivery whose payload is gone has nothing to send again.
    .where('w.payload_removed', 'is', null)
    .where('w.created_at', '>=', window.since)
    .where('w.created_at', '<', window.until);
}
