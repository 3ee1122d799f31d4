import { sql } from 'kysely';
import type { EntityManager } from '../../db';
import { IN_FLIGHT_BOUND_MS } from '../../../workflows/policy';
import type { DeliveryRef } from '../contract';
import { db, type RecordsContext } from './rows';

/**
 * An endpoint's line on Temporal: the deliveries that found all its turns in flight
 * (DELIVERY_ENDPOINT_CONCURRENCY) wait without an activity, and ask again when a turn
 * frees. Both reads count what beginAttempt counts: attempts begun and unfinished, begun
 * within IN_FLIGHT_BOUND_MS. Methods of DeliveryRecords (index.ts).
 */
export const turnMethods = {
  /**
   * A delivery's place in its endpoint's line (open ones recorded before it, up to `limit`):
   * a waiting delivery's wait. The line is ordered as nextInLine takes it, by time recorded
   * then id: a publish's deliveries share their recording time, and each still has its place.
   */
  async placeInLine(this: RecordsContext, em: EntityManager, ref: DeliveryRef, limit: number): Promise<number> {
    const { rows } = await sql<{ ahead: number }>`
      select count(*)::int as ahead from (
        select 1 from webhook_deliveries o
         where o.endpoint_id = ${ref.endpointId}
           and (o.created_at, o.id) < (select d.created_at, d.id from webhook_deliveries d where d.id = ${ref.deliveryId})
           and o.status in ('pending', 'retrying')
         limit ${limit}) ahead`.execute(db(em));
    return rows[0]?.ahead ?? 0;
  },

  /**
   * The workflows to wake when one of an endpoint's turns frees: its oldest due deliveries
   * with no attempt in flight, as many as it has turns free now. A wake is a hint: the
   * woken delivery's begin decides again under its row's lock, and one that finds the turn
   * taken waits again.
   */
  async nextInLine(this: RecordsContext, em: EntityManager, endpoint: { organizationId: string; endpointId: string }): Promise<string[]> {
    const now = new Date(this.schedule.now());
    const since = new Date(now.getTime() - IN_FLIGHT_BOUND_MS);
    const { rows } = await sql<{ workflow_id: string }>`
      with busy as (
        select a.delivery_id from delivery_attempts a join webhook_deliveries x on x.id = a.delivery_id
         where a.finished_at is null and a.started_at > ${since} and x.endpoint_id = ${endpoint.endpointId})
      select d.workflow_id from webhook_deliveries d
       where d.endpoint_id = ${endpoint.endpointId} and d.organization_id = ${endpoint.organizationId}
         and d.status in ('pending', 'retrying') and d.next_attempt_at <= ${now}
         and d.workflow_id is not null
         and d.id not in (select delivery_id from busy)
       order by d.created_at, d.id
       limit greatest(0, ${this.schedule.endpointConcurrency} - (select count(*) from busy))`.execute(db(em));
    return rows.map((r) => r.workflow_id);
  },
};
