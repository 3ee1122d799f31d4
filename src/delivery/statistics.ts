import { sql } from 'kysely';
import type { EntityManager } from '../db';

/** An endpoint's deliveries over a period, as one statement reads them. */
export interface EndpointStatistics {
  byStatus: Record<string, number>;
  attempts: number;
  /** Of the attempts that got an answer, milliseconds from dispatch to the outcome; null when none did. */
  p50Ms: number | null;
  p95Ms: number | null;
  lastFailure: { deliveryId: string; atMs: number; responseStatus: number | null; error: string | null } | null;
}

interface Row {
  by_status: Record<string, number> | null;
  attempts: number;
  p50: number | null;
  p95: number | null;
  last_failure: { delivery_id: string; at_ms: number; response_status: number | null; error: string | null } | null;
}

/**
 * One statement: the endpoint's deliveries recorded since `since` (webhook_deliveries_recent_idx,
 * endpoint then time), their counted attempts through the attempts' primary key, then the
 * counts, percentiles and the last failed attempt over those.
 */
export async function endpointStatistics(em: EntityManager, p: { organizationId: string; endpointId: string; since: Date }): Promise<EndpointStatistics> {
  const query = sql<Row>`
    with period as (
      select id, status from webhook_deliveries
       where endpoint_id = ${p.endpointId} and organization_id = ${p.organizationId} and created_at >= ${p.since}
    ), tried as (
      select a.delivery_id, a.finished_at, a.response_status, a.error,
             extract(epoch from a.finished_at - a.dispatched_at) * 1000 as ms
        from period d join delivery_attempts a on a.delivery_id = d.id
       where a.dispatched_at is not null
    )
    select
      (select json_object_agg(status, n) from (select status, count(*)::int as n from period group by status) s) as by_status,
      (select count(*)::int from tried) as attempts,
      (select percentile_cont(0.5) within group (order by ms) from tried where response_status is not null and finished_at is not null) as p50,
      (select percentile_cont(0.95) within group (order by ms) from tried where response_status is not null and finished_at is not null) as p95,
      (select json_build_object('delivery_id', delivery_id, 'at_ms', (extract(epoch from finished_at) * 1000)::bigint,
                                'response_status', response_status, 'error', error)
         from tried
        where finished_at is not null and (response_status is null or response_status not between 200 and 299)
        order by finished_at desc limit 1) as last_failure`;
  const { rows } = await query.execute(em.getKysely());
  const row = rows[0];
  if (!row) throw new Error('the statistics statement answered no row');
  return {
    byStatus: row.by_status ?? {},
    attempts: row.attempts,
    p50Ms: row.p50 === null ? null : Math.round(Number(row.p50)),
    p95Ms: row.p95 === null ? null : Math.round(Number(row.p95)),
    lastFailure: row.last_failure
      ? { deliveryId: row.last_failure.delivery_id, atMs: Number(row.last_failure.at_ms), responseStatus: row.last_failure.response_status, error: row.last_failure.error }
      : null,
  };
}
