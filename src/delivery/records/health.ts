import { sql } from 'kysely';
import type { EntityManager } from '../../db';
import { db, FAILING_PAUSE, type RecordsContext } from './rows';

/**
 * What the deliveries say of an endpoint's health, for the automatic pause (src/webhooks
 * decides and pauses; these only read the delivery tables it does not own). Methods of
 * DeliveryRecords (index.ts).
 */

/** The automatic pause's threshold. */
export interface FailingThreshold {
  /** The endpoint's last this many finished deliveries all failed... */
  deadLetters: number;
  /** ...and the first of them began at least this long ago; waived when one was answered 410 Gone. */
  failingForMs: number;
}

/** An active endpoint over the threshold. */
export interface FailingEndpoint {
  endpointId: string;
  organizationId: string;
  /** When the first of the failed deliveries counted was recorded. */
  failingSince: Date;
  /** The receiver answered 410 Gone to one of them. */
  gone: boolean;
}

export const healthMethods = {
  /**
   * Active endpoints over the automatic pause's threshold: their last `deadLetters`
   * deliveries since their last resume all failed (dead-lettered, or answered 410 Gone on an
   * attempt), with no delivered one among them, for at least `failingForMs` (at once after a
   * 410). Looks only at endpoints with a dead letter or a 410 answer since `since`, so a sweep
   * reads what changed, not every endpoint.
   */
  async failingEndpoints(this: RecordsContext, em: EntityManager, since: Date, threshold: FailingThreshold): Promise<FailingEndpoint[]> {
    const failingBefore = new Date(this.schedule.now() - threshold.failingForMs);
    const { rows } = await sql<{ endpoint_id: string; organization_id: string; failing_since: Date; gone: boolean }>`
      with touched as (
        select dl.endpoint_id from dead_letters dl where dl.created_at > ${since}
        union
        select d.endpoint_id from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id
         where a.response_status = 410 and a.finished_at > ${since}
      )
      select e.id as endpoint_id, e.organization_id, w.failing_since, w.gone
        from touched t
        join webhook_endpoints e on e.id = t.endpoint_id
        cross join lateral (
          select count(*) as counted, count(*) filter (where r.status = 'delivered') as delivered,
                 min(r.created_at) as failing_since, coalesce(bool_or(r.last_response_status = 410), false) as gone
            from (select d.status, d.last_response_status, d.created_at from webhook_deliveries d
                   where d.endpoint_id = e.id and d.updated_at > coalesce(e.resumed_at, '-infinity'::timestamptz)
                     and (d.status in ('delivered', 'dead_lettered') or d.last_response_status = 410)
                   order by d.updated_at desc limit ${threshold.deadLetters}) r
        ) w
       where e.paused_at is null and e.disabled_at is null
         and w.counted >= ${threshold.deadLetters} and w.delivered = 0
         and (w.gone or w.failing_since <= ${failingBefore})`.execute(db(em));
    return rows.map((r) => ({ endpointId: r.endpoint_id, organizationId: r.organization_id, failingSince: new Date(r.failing_since), gone: r.gone }));
  },

  /** Endpoints paused for failing whose test delivery has been delivered since: their pause is to be lifted. */
  async recoveredEndpoints(this: RecordsContext, em: EntityManager): Promise<{ endpointId: string; organizationId: string }[]> {
    const { rows } = await sql<{ endpoint_id: string; organization_id: string }>`
      select e.id as endpoint_id, e.organization_id from webhook_endpoints e
       where e.pause_reason = ${FAILING_PAUSE} and e.paused_at is not null and e.disabled_at is null
         and exists (select 1 from webhook_deliveries d where d.endpoint_id = e.id and d.event_type = 'webhook.test'
                      and d.status = 'delivered' and d.delivered_at > e.paused_at)`.execute(db(em));
    return rows.map((r) => ({ endpointId: r.endpoint_id, organizationId: r.organization_id }));
  },
};
