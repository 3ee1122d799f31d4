import { sql, type QueryCreator } from 'kysely';
import { statementPart, type EntityManager } from '../../db';
import { db, FINAL_STATUSES, type RecordsContext, type Tables } from './rows';

/**
 * What retention and erasure do to the delivery data: payloads past their organization's
 * horizon cleared, attempt rows past theirs deleted, and an organization's payloads and
 * response excerpts erased on request. The delivery row stays (status, attempt count, ids,
 * last error): the audit and billing read it. Methods of DeliveryRecords (index.ts).
 *
 * Each statement does a bounded batch in its own short transaction, walking an index in
 * order and locking only the rows it changes (SKIP LOCKED: a row an engine or a resend holds
 * waits for the next pass). Only finished deliveries lose their payload: an open one still
 * needs it to send.
 */

/** Each organization's horizons, as the webhooks module's `retention` CTE gives them (organizationRetention). */
export interface RetentionCte {
  retention: { organization_id: string; payload_before: Date; attempts_before: Date };
}

/**
 * Clears the payloads of up to `limit` finished deliveries recorded before their
 * organization's payload horizon, oldest first, along the index of the deliveries that still
 * hold one (removed rows leave it). `youngest` is the shortest horizon of any plan: the walk
 * stops there. Rows a longer plan keeps are read again each pass; there are at most the
 * deliveries recorded between the shortest and the longest horizon.
 */
const expiredPayloadsUpdate = statementPart((qc: QueryCreator<Tables & RetentionCte>, youngest: Date, limit: number, now: Date) =>
  qc
    .with('expiring', (w) =>
      w
        .selectFrom('webhook_deliveries as d')
        .innerJoin('retention as r', 'r.organization_id', 'd.organization_id')
        .select('d.id')
        .where('d.payload_removed', 'is', null)
        .where('d.created_at', '<', youngest)
        .whereRef('d.created_at', '<', 'r.payload_before')
        .where('d.status', 'in', FINAL_STATUSES)
        .orderBy('d.created_at')
        .orderBy('d.id')
        .limit(limit)
        .forUpdate('d')
        .skipLocked(),
    )
    .updateTable('webhook_deliveries as w')
    .from('expiring as e')
    .set({ payload: '', payload_removed: 'expired', payload_removed_at: now })
    .whereRef('w.id', '=', 'e.id'),
);

/**
 * Deletes up to `limit` attempts of finished deliveries started before their organization's
 * attempt horizon, oldest first along the attempts' start index, once the statistics roll-up
 * has counted them. The delivery keeps its count.
 */
const oldAttemptsDelete = statementPart((qc: QueryCreator<Tables & RetentionCte>, youngest: Date, limit: number) =>
  qc
    .with('old', (w) =>
      w
        .selectFrom('delivery_attempts as a')
        .innerJoin('webhook_deliveries as d', 'd.id', 'a.delivery_id')
        .innerJoin('retention as r', 'r.organization_id', 'd.organization_id')
        .select(['a.delivery_id', 'a.series', 'a.attempt'])
        .where('a.started_at', '<', youngest)
        .whereRef('a.started_at', '<', 'r.attempts_before')
        .where('a.finished_at', 'is not', null)
        // An open delivery's attempts are its schedule's record: they go once it has finished.
        .where('d.status', 'in', FINAL_STATUSES)
        // Its endpoint's hourly statistics hold it first (src/delivery/statistics.ts), so no figure loses it.
        .where(sql<boolean>`d.statistics_series = d.series`)
        .orderBy('a.started_at')
        .limit(limit)
        .forUpdate('a')
        .skipLocked(),
    )
    .deleteFrom('delivery_attempts as x')
    .using('old as o')
    .whereRef('x.delivery_id', '=', 'o.delivery_id')
    .whereRef('x.series', '=', 'o.series')
    .whereRef('x.attempt', '=', 'o.attempt'),
);

/** Whose delivery data an erasure takes: an organization's, of one endpoint, or of one event. */
export interface ErasureScope {
  organizationId: string;
  endpointId?: string;
  eventId?: string;
}

/** What an erasure found (a dry run) or did. */
export interface ErasureCounts {
  /** Deliveries in the scope. */
  deliveries: number;
  /** Payloads erased (or that would be): finished deliveries whose payload was not erased before. */
  payloads: number;
  /** Attempts whose response excerpt was erased (or would be). */
  responseExcerpts: number;
  /** Deliveries still being sent, whose payload is kept: erase again once they finish. */
  open: number;
}

/** Where an erasure's walk of one endpoint got to: newest first, as the log's index runs. */
export interface ErasureCursor {
  /** created_at as PostgreSQL writes it: microseconds kept, so the walk neither skips nor repeats a row. */
  createdAt: string;
  id: string;
}

export const retentionMethods = {
  /**
   * Retention: clears the payloads of up to `limit` finished deliveries recorded before their
   * organization's horizon (the `retention` CTE of `qc`), oldest first; returns how many.
   * `youngest`: the shortest horizon of any plan.
   */
  async expirePayloads<DB extends Tables & RetentionCte>(this: RecordsContext, qc: QueryCreator<DB>, youngest: Date, limit: number): Promise<number> {
    const result = await expiredPayloadsUpdate(qc, youngest, limit, new Date(this.schedule.now())).executeTakeFirst();
    return Number(result.numUpdatedRows);
  },

  /** Retention: deletes up to `limit` finished attempts started before their organization's horizon, oldest first; returns how many. */
  async deleteAttempts<DB extends Tables & RetentionCte>(this: RecordsContext, qc: QueryCreator<DB>, youngest: Date, limit: number): Promise<number> {
    const result = await oldAttemptsDelete(qc, youngest, limit).executeTakeFirst();
    return Number(result.numDeletedRows);
  },

  /** The organization's endpoints an erasure walks (one when the scope names it), whatever their state. */
  async erasureEndpoints(this: RecordsContext, em: EntityManager, scope: ErasureScope): Promise<string[]> {
    let q = db(em).selectFrom('webhook_endpoints').select('id').where('organization_id', '=', scope.organizationId);
    if (scope.endpointId) q = q.where('id', '=', scope.endpointId);
    return (await q.orderBy('id').execute()).map((e) => e.id);
  },

  /**
   * One page of an endpoint's deliveries in the scope, up to `limit`, newest first after
   * `after` along the (endpoint_id, created_at, id) index: erased (or, with `dryRun`, counted)
   * in one statement. Payloads of finished deliveries become empty with payload_removed
   * 'erased' (an expired one becomes erased too); every response excerpt of their attempts is
   * cleared. Statuses, counts and ids stay. `next` is null once the endpoint has no more.
   */
  async erasePage(
    this: RecordsContext,
    em: EntityManager,
    scope: ErasureScope,
    endpointId: string,
    after: ErasureCursor | null,
    limit: number,
    dryRun: boolean,
  ): Promise<{ counts: ErasureCounts; next: ErasureCursor | null }> {
    const now = new Date(this.schedule.now());
    const page = sql`select d.id, d.created_at, d.status in (${sql.join([...FINAL_STATUSES])}) as finished, d.payload_removed
        from webhook_deliveries d
        where d.endpoint_id = ${endpointId} and d.organization_id = ${scope.organizationId}
          ${scope.eventId === undefined ? sql`` : sql`and d.event_id = ${scope.eventId}`}
          ${after ? sql`and (d.created_at, d.id) < (${after.createdAt}::timestamptz, ${after.id}::uuid)` : sql``}
        order by d.created_at desc, d.id desc
        limit ${limit}`;
    const changes = dryRun
      ? sql`payloads as (select id from page where finished and payload_removed is distinct from 'erased'),
            excerpts as (select 1 from delivery_attempts a join page p on p.id = a.delivery_id where a.response_excerpt is not null)`
      : sql`payloads as (
              update webhook_deliveries w set payload = '', payload_removed = 'erased', payload_removed_at = ${now}
              from page p
              where w.id = p.id and w.status in (${sql.join([...FINAL_STATUSES])}) and w.payload_removed is distinct from 'erased'
              returning w.id),
            excerpts as (
              update delivery_attempts a set response_excerpt = null
              from page p
              where a.delivery_id = p.id and a.response_excerpt is not null
              returning 1)`;
    const { rows } = await sql<{ deliveries: number; payloads: number; excerpts: number; open: number; last_at: string | null; last_id: string | null }>`
      with page as (${page}), ${changes}
      select (select count(*) from page)::int as deliveries,
             (select count(*) from payloads)::int as payloads,
             (select count(*) from excerpts)::int as excerpts,
             (select count(*) from page where not finished)::int as open,
             (select created_at::text from page order by created_at, id limit 1) as last_at,
             (select id from page order by created_at, id limit 1) as last_id`.execute(db(em));
    const row = rows[0]!;
    const counts = { deliveries: row.deliveries, payloads: row.payloads, responseExcerpts: row.excerpts, open: row.open };
    const next = row.deliveries === limit && row.last_at !== null && row.last_id !== null ? { createdAt: row.last_at, id: row.last_id } : null;
    return { counts, next };
  },
};
