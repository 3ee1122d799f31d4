import { setTimeout as delay } from 'node:timers/promises';
import { sql, type RawBuilder } from 'kysely';
import type { Logger } from '../config';
import type { EntityManager, MikroORM } from '../db';
import { Poller } from '../poller';
import { FINAL_STATUSES } from './records';

/**
 * Endpoint statistics over hourly roll-ups (endpoint_statistics_hours, migration
 * 20261128000000): a finished delivery is added to the row of its endpoint and the hour it
 * was recorded in by a background pass (StatisticsRollup), which then marks it rolled up
 * with its series (`statistics_series`) and the status it was counted in
 * (`statistics_status`). A reader adds the period's hourly rows to what the deliveries not
 * rolled up yet say themselves (open ones, finished ones the pass has not reached, resent
 * ones), found along the partial index that holds only those. A resent delivery stays counted
 * in its rolled status until the pass rolls its new series up; the reader takes it out of that
 * status meanwhile, and reads only its attempts of the later series. So the answer is the
 * same whenever the pass runs; the pass only keeps the part read row by row small.
 *
 * The roll-ups keep what retention later removes: an attempt row deleted past its horizon
 * stays counted (retention deletes the attempts of rolled-up deliveries only).
 */

/** An endpoint's deliveries over a period. */
export interface EndpointStatistics {
  byStatus: Record<string, number>;
  attempts: number;
  /**
   * Of the attempts that got an answer, milliseconds from dispatch to the outcome, as
   * estimated from the response-time buckets (responseTimeEstimate); null when none did.
   */
  p50Ms: number | null;
  p95Ms: number | null;
  lastFailure: { deliveryId: string; atMs: number; responseStatus: number | null; error: string | null } | null;
}

/** Response-time buckets per roll-up row: a quarter power of two wide, from 1 ms to about 46 s. */
const RESPONSE_BUCKETS = 64;

/**
 * The response time a bucket stands for: the geometric middle of its bounds, within 9.1 %
 * (2^(1/8)) of any time it holds; 1 ms for the first (up to 1 ms).
 */
function responseTimeEstimate(bucket: number): number {
  return bucket <= 1 ? 1 : 2 ** ((bucket - 1.5) / 4);
}

/** The nearest-rank percentile `p` (0–1) of the times the bucket counts describe, as an estimate; null when they count none. */
function bucketPercentile(counts: readonly number[], p: number): number | null {
  const total = counts.reduce((sum, n) => sum + n, 0);
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil(p * total));
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return responseTimeEstimate(i + 1);
  }
  return responseTimeEstimate(counts.length);
}

/** The 1-based bucket of a response time in milliseconds: the same for the roll-ups and for rows read live. */
function bucketOf(ms: RawBuilder<unknown>): RawBuilder<number> {
  return sql<number>`(1 + least(${sql.lit(RESPONSE_BUCKETS - 1)}, greatest(0, ceil(4 * ln(greatest((${ms})::float8, 1)) / ln(2)))))::int`;
}

/** An attempt's response time in milliseconds, from `a`. */
const responseMs = sql`extract(epoch from a.finished_at - a.dispatched_at) * 1000`;

/** The final statuses a roll-up row counts, each a column of its own. */
const FINAL = sql.join(FINAL_STATUSES.map((s) => sql.lit(s)));

interface Row {
  by_status: Record<string, number> | null;
  attempts: number;
  buckets: number[] | null;
  last_failure: { delivery_id: string; at_ms: number; response_status: number | null; error: string | null } | null;
}

/**
 * The endpoint's deliveries recorded since `since` (an hour's start: the roll-ups are by
 * hour) in one statement: the hourly rows of the period (at most 24 × 30 for 30 days) plus
 * the deliveries not rolled up yet, along webhook_deliveries_unrolled_idx, and their
 * attempts of the series not rolled up.
 */
export async function endpointStatistics(em: EntityManager, p: { organizationId: string; endpointId: string; since: Date }): Promise<EndpointStatistics> {
  const query = sql<Row>`
    with hours as (
      select delivered, dead_lettered, failed, attempts, response_ms_buckets,
             last_failure_at, last_failure_delivery_id, last_failure_status, last_failure_error
        from endpoint_statistics_hours
       where endpoint_id = ${p.endpointId} and hour >= ${p.since}
    ), unrolled as (
      select id, status, statistics_series, statistics_status from webhook_deliveries
       where endpoint_id = ${p.endpointId} and created_at >= ${p.since}
         and statistics_series is distinct from series and organization_id = ${p.organizationId}
    ), tried as (
      select a.delivery_id, a.finished_at, a.response_status, a.error, ${responseMs} as ms
        from unrolled d join delivery_attempts a on a.delivery_id = d.id
       where a.series > coalesce(d.statistics_series, 0) and a.dispatched_at is not null
    ), statuses as (
      select status, count(*)::int as n from unrolled group by status
      union all select statistics_status, -count(*)::int from unrolled where statistics_status is not null group by statistics_status
      union all select 'delivered', sum(delivered)::int from hours
      union all select 'dead_lettered', sum(dead_lettered)::int from hours
      union all select 'failed', sum(failed)::int from hours
    ), buckets as (
      select ${bucketOf(sql`ms`)} as i, count(*)::int as n from tried
       where response_status is not null and finished_at is not null group by 1
      union all
      select u.i::int, u.n from hours h cross join lateral unnest(h.response_ms_buckets) with ordinality as u(n, i)
    ), failures as (
      select delivery_id, finished_at as at, response_status, error from tried
       where finished_at is not null and (response_status is null or response_status not between 200 and 299)
      union all
      select last_failure_delivery_id, last_failure_at, last_failure_status, last_failure_error from hours where last_failure_at is not null
    )
    select
      (select json_object_agg(status, n) from (select status, sum(n)::int as n from statuses where n is not null group by status having sum(n) <> 0) s) as by_status,
      (select count(*)::int from tried) + (select coalesce(sum(attempts), 0)::int from hours) as attempts,
      (select json_agg(coalesce(b.n, 0) order by g.i)
         from generate_series(1, ${sql.lit(RESPONSE_BUCKETS)}) g(i)
         left join (select i, sum(n)::int as n from buckets group by i) b on b.i = g.i) as buckets,
      (select json_build_object('delivery_id', delivery_id, 'at_ms', floor(extract(epoch from at) * 1000)::float8,
                                'response_status', response_status, 'error', error)
         from failures order by at desc limit 1) as last_failure`;
  const { rows } = await query.execute(em.getKysely());
  const row = rows[0];
  if (!row) throw new Error('the statistics statement answered no row');
  const buckets = row.buckets ?? [];
  const estimate = (q: number) => {
    const ms = bucketPercentile(buckets, q);
    return ms === null ? null : Math.round(ms);
  };
  return {
    byStatus: row.by_status ?? {},
    attempts: row.attempts,
    p50Ms: estimate(0.5),
    p95Ms: estimate(0.95),
    lastFailure: row.last_failure
      ? { deliveryId: row.last_failure.delivery_id, atMs: Number(row.last_failure.at_ms), responseStatus: row.last_failure.response_status, error: row.last_failure.error }
      : null,
  };
}

/**
 * Rolls up to `limit` finished deliveries not rolled up yet into their endpoint's hourly rows,
 * in one statement (its own transaction): each delivery's status (out of the status it was
 * rolled up in before, for a resent one), its sent attempts of the series not rolled up, their
 * response times and the last failure, then the delivery marked rolled up with its series.
 * Deliveries are taken with SKIP LOCKED: passes running at once (every instance runs one) take
 * different ones, and a row a resend holds waits for the next pass. Answers how many it rolled up.
 */
export async function rollUpStatistics(em: EntityManager, limit: number): Promise<number> {
  const { rows } = await sql<{ rolled: number }>`
    with picked as (
      select id, endpoint_id, date_trunc('hour', created_at, 'UTC') as hour, status, series, statistics_series, statistics_status
        from webhook_deliveries
       where statistics_series is distinct from series and status in (${FINAL})
       order by endpoint_id, created_at
       limit ${limit}
         for update skip locked
    ), tried as (
      select p.endpoint_id, p.hour, a.delivery_id, a.finished_at, a.response_status, a.error, ${responseMs} as ms
        from picked p join delivery_attempts a on a.delivery_id = p.id
       where a.series > coalesce(p.statistics_series, 0) and a.series <= p.series and a.dispatched_at is not null
    ), counts as (
      select endpoint_id, hour,
             ${sql.join(
               FINAL_STATUSES.map(
                 (s) => sql`(count(*) filter (where status = ${sql.lit(s)}) - count(*) filter (where statistics_status = ${sql.lit(s)}))::int as ${sql.ref(s)}`,
               ),
             )}
        from picked group by endpoint_id, hour
    ), sent as (
      select endpoint_id, hour, count(*)::int as attempts from tried group by endpoint_id, hour
    ), bucketed as (
      select endpoint_id, hour, ${bucketOf(sql`ms`)} as i, count(*)::int as n from tried
       where response_status is not null and finished_at is not null group by 1, 2, 3
    ), histograms as (
      select c.endpoint_id, c.hour, array_agg(coalesce(b.n, 0) order by g.i) as buckets
        from counts c cross join generate_series(1, ${sql.lit(RESPONSE_BUCKETS)}) g(i)
        left join bucketed b on b.endpoint_id = c.endpoint_id and b.hour = c.hour and b.i = g.i
       group by c.endpoint_id, c.hour
    ), failures as (
      select distinct on (endpoint_id, hour) endpoint_id, hour, delivery_id, finished_at, response_status, error from tried
       where finished_at is not null and (response_status is null or response_status not between 200 and 299)
       order by endpoint_id, hour, finished_at desc
    ), added as (
      insert into endpoint_statistics_hours as s
        (endpoint_id, hour, delivered, dead_lettered, failed, attempts, response_ms_buckets,
         last_failure_at, last_failure_delivery_id, last_failure_status, last_failure_error)
      select c.endpoint_id, c.hour, c.delivered, c.dead_lettered, c.failed, coalesce(t.attempts, 0), h.buckets,
             f.finished_at, f.delivery_id, f.response_status, f.error
        from counts c
        join histograms h on h.endpoint_id = c.endpoint_id and h.hour = c.hour
        left join sent t on t.endpoint_id = c.endpoint_id and t.hour = c.hour
        left join failures f on f.endpoint_id = c.endpoint_id and f.hour = c.hour
       order by c.endpoint_id, c.hour
      on conflict (endpoint_id, hour) do update set
        delivered = s.delivered + excluded.delivered,
        dead_lettered = s.dead_lettered + excluded.dead_lettered,
        failed = s.failed + excluded.failed,
        attempts = s.attempts + excluded.attempts,
        response_ms_buckets = (select array_agg(x + y order by i) from unnest(s.response_ms_buckets, excluded.response_ms_buckets) with ordinality as u(x, y, i)),
        ${sql.join(
          ['last_failure_at', 'last_failure_delivery_id', 'last_failure_status', 'last_failure_error'].map(
            (column) =>
              sql`${sql.ref(column)} = case when excluded.last_failure_at > s.last_failure_at or s.last_failure_at is null
                then excluded.${sql.ref(column)} else s.${sql.ref(column)} end`,
          ),
        )}
      returning 1
    ), marked as (
      update webhook_deliveries w set statistics_series = p.series, statistics_status = p.status
        from picked p where w.id = p.id
      returning 1
    )
    select count(*)::int as rolled from marked`.execute(em.getKysely());
  return rows[0]?.rolled ?? 0;
}

export interface StatisticsRollupOptions {
  orm: MikroORM;
  logger: Logger;
  /** Time from the end of one pass to the start of the next. */
  intervalMs: number;
  /** Deliveries one statement rolls up at most. */
  batchSize?: number;
}

/**
 * The roll-up pass in the background of every API instance: batches of `batchSize` until one
 * comes back short, then again `intervalMs` later. The answers do not depend on it (what it
 * has not reached is read row by row); it keeps that part small. A short pause after each
 * full batch leaves the database room while it catches up on a backlog.
 */
export class StatisticsRollup {
  private readonly loop: Poller;

  constructor(private readonly options: StatisticsRollupOptions) {
    this.loop = new Poller({
      round: () => this.catchUp(),
      intervalMs: options.intervalMs,
      onError: (error) => options.logger.warn({ err: error }, 'statistics roll-up failed; the next pass goes on'),
    });
  }

  start(): void {
    this.loop.start();
  }

  /** No more passes; a pass running ends after its current batch, which is waited for. */
  async stop(): Promise<void> {
    await this.loop.stop();
  }

  /** Batches until one comes back short (or stop()); how many deliveries were rolled up. */
  async catchUp(): Promise<number> {
    const batchSize = this.options.batchSize ?? 2000;
    let rolled = 0;
    while (!this.loop.signal.aborted) {
      const n = await rollUpStatistics(this.options.orm.em.fork(), batchSize);
      rolled += n;
      if (n < batchSize) break;
      await delay(20, undefined, { signal: this.loop.signal }).catch(() => undefined);
    }
    return rolled;
  }
}
