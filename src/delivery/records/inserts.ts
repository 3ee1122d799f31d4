import { randomUUID } from 'node:crypto';
import type { DeliveryStatus, EntityManager, PayloadRemoval } from '../../db';
import { workflowIdFor } from '../workflow-id';
import { db, FINAL_STATUSES, listedQuery, type ListedDelivery, type RecordsContext } from './rows';

/**
 * How a delivery begins a series of attempts: recorded pending (record), or a finished one
 * made pending again in its next series (resend). Methods of DeliveryRecords (index.ts).
 */

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

export const insertMethods = {
  /**
   * Records deliveries, pending and due now, in one statement. (endpoint, event id) is
   * unique: a delivery that exists already is returned as it is, never made twice (the
   * insert leaves it alone, then the deliveries are read as listed).
   */
  async record(this: RecordsContext, em: EntityManager, deliveries: NewDelivery[]): Promise<ListedDelivery[]> {
    if (deliveries.length === 0) return [];
    const now = new Date(this.schedule.now());
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
    return listed(em, (q) =>
      q.where((eb) => eb.or(deliveries.map((d) => eb.and([eb('w.endpoint_id', '=', d.endpointId), eb('w.event_id', '=', d.eventId)])))),
    );
  },

  /**
   * Starts a new series of attempts on a finished delivery, in the caller's transaction:
   * pending and due now, attempts counted from 0 again under the next series number, its
   * own workflow id, off the dead-letter queue. The event id, body and (endpoint, event id)
   * stay the delivery's. Only a delivery in one of `from` is resent; any other answers
   * with its status and is left as it is, and one whose payload is gone says why. The row
   * is locked (FOR UPDATE) first.
   */
  async resend(
    this: RecordsContext,
    em: EntityManager,
    which: { deliveryId: string; organizationId: string; endpointId?: string },
    from: readonly DeliveryStatus[] = FINAL_STATUSES,
  ): Promise<{ resent: ListedDelivery } | { refused: DeliveryStatus } | { payloadRemoved: PayloadRemoval } | null> {
    const k = db(em);
    let q = k
      .selectFrom('webhook_deliveries')
      .select(['id', 'organization_id', 'endpoint_id', 'event_id', 'status', 'series', 'payload_removed'])
      .where('id', '=', which.deliveryId)
      .where('organization_id', '=', which.organizationId);
    if (which.endpointId) q = q.where('endpoint_id', '=', which.endpointId);
    const row = await q.forUpdate().executeTakeFirst();
    if (!row) return null;
    if (!from.includes(row.status)) return { refused: row.status };
    if (row.payload_removed) return { payloadRemoved: row.payload_removed };
    const now = new Date(this.schedule.now());
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
    const [resent] = await listed(em, (l) => l.where('w.id', '=', row.id));
    return { resent: resent! };
  },
};

async function listed(em: EntityManager, where: (q: ReturnType<typeof listedQuery>) => ReturnType<typeof listedQuery>): Promise<ListedDelivery[]> {
  return where(listedQuery(db(em))).execute();
}
