import { randomUUID } from 'node:crypto';
import type { DeliveryStatus, EntityManager } from '../../db';
import { workflowIdFor } from '../workflow-id';
import { db, listedQuery, type ListedDelivery, type Schedule } from './rows';

/**
 * How a delivery begins a series of attempts: recorded pending (record), or a finished one
 * made pending again in its next series (resend). DeliveryRecords (index.ts) is the
 * door; what each promises is written there.
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

/** One insert that leaves an existing (endpoint, event id) as it is, then the deliveries as listed. */
export async function record(em: EntityManager, schedule: Schedule, deliveries: NewDelivery[]): Promise<ListedDelivery[]> {
  if (deliveries.length === 0) return [];
  const now = new Date(schedule.now());
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
}

/** The delivery locked (FOR UPDATE), then its next series written and its dead letter removed, in the caller's transaction. */
export async function resend(
  em: EntityManager,
  schedule: Schedule,
  which: { deliveryId: string; organizationId: string; endpointId?: string },
  from: readonly DeliveryStatus[],
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
  const now = new Date(schedule.now());
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
}

async function listed(em: EntityManager, where: (q: ReturnType<typeof listedQuery>) => ReturnType<typeof listedQuery>): Promise<ListedDelivery[]> {
  return where(listedQuery(db(em))).execute();
}
