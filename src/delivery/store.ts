import type { EntityManager } from '../db/orm';
import type { WebhookDelivery } from '../db';

/** Delivery rows as the list route shows them: the five newest per endpoint. */
export const RECENT_DELIVERIES = 5;

/** What the list shows; the payload (possibly large) is never listed. */
const LISTED_COLUMNS = `id, organization_id, endpoint_id, event_id, event_type, '' as payload, status, attempt_count, next_attempt_at,
  last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at`;

/**
 * The newest deliveries of many endpoints in one query: a lateral join walks the
 * (endpoint_id, created_at desc) index for each endpoint and stops after five, so the
 * cost does not grow with the history.
 */
export async function recentDeliveriesByEndpoint(
  em: EntityManager,
  endpointIds: string[],
): Promise<Map<string, WebhookDelivery[]>> {
  const byEndpoint = new Map<string, WebhookDelivery[]>(endpointIds.map((id) => [id, []]));
  if (endpointIds.length === 0) return byEndpoint;
  // The endpoint ids are the organization's own (the caller read them scoped to it). Filtering
  // on organization_id again made the planner misjudge small organizations in a large table
  // into plans costly enough to be JIT-compiled on every call.
  const rows = await em.execute<DeliveryRow[]>(
    `select d.* from unnest(?::uuid[]) as e(id)
       cross join lateral (
         select ${LISTED_COLUMNS} from webhook_deliveries w
          where w.endpoint_id = e.id
          order by w.created_at desc, w.id desc
          limit ${RECENT_DELIVERIES}
       ) d
      order by d.endpoint_id, d.created_at desc, d.id desc`,
    // The query builder would expand an array parameter into a list; pass one array literal of uuids.
    [`{${endpointIds.join(',')}}`],
  );
  for (const row of rows) byEndpoint.get(row.endpoint_id)?.push(deliveryFromRow(row));
  return byEndpoint;
}

export interface DeliveryRow {
  id: string;
  organization_id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  payload: string;
  status: WebhookDelivery['status'];
  attempt_count: number;
  next_attempt_at: Date | string | null;
  last_error: string | null;
  last_response_status: number | null;
  workflow_id: string;
  lease_until: Date | string | null;
  delivered_at: Date | string | null;
  created_at: Date | string;
  updated_at: Date | string;
}

export function deliveryFromRow(row: DeliveryRow): WebhookDelivery {
  return {
    id: row.id,
    organizationId: row.organization_id,
    endpointId: row.endpoint_id,
    eventId: row.event_id,
    eventType: row.event_type,
    payload: row.payload,
    status: row.status,
    attemptCount: row.attempt_count,
    nextAttemptAt: dateOrNull(row.next_attempt_at),
    lastError: row.last_error,
    lastResponseStatus: row.last_response_status,
    workflowId: row.workflow_id,
    leaseUntil: dateOrNull(row.lease_until),
    deliveredAt: dateOrNull(row.delivered_at),
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  } as WebhookDelivery;
}

/** Raw queries hand timestamps back as the driver parsed them: a Date or an ISO string. */
function dateOrNull(value: Date | string | null): Date | null {
  return value === null ? null : new Date(value);
}
