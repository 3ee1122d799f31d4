import type { EntityManager } from '../db/orm';
import type { WebhookDelivery } from '../db';

/** Delivery rows as the list route shows them: the five newest per endpoint. */
export const RECENT_DELIVERIES = 5;

/**
 * A delivery as lists show it: the listed fields only (never the payload), timestamps as
 * epoch milliseconds. A list carries up to 250 of these, so the query hands back numbers
 * rather than timestamps the driver would parse into Dates only to be taken apart again.
 */
export interface ListedDelivery {
  id: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  status: WebhookDelivery['status'];
  attemptCount: number;
  nextAttemptAtMs: number | null;
  lastError: string | null;
  lastResponseStatus: number | null;
  workflowId: string;
  deliveredAtMs: number | null;
  createdAtMs: number;
  updatedAtMs: number;
}

/** Epoch milliseconds, truncated as a JavaScript Date truncates microseconds. */
const ms = (column: string) => `floor(extract(epoch from ${column}) * 1000)::float8`;

/** Each listed field and the expression that reads it. */
const LISTED: Record<keyof ListedDelivery, string> = {
  id: 'id',
  endpointId: 'endpoint_id',
  eventId: 'event_id',
  eventType: 'event_type',
  status: 'status',
  attemptCount: 'attempt_count',
  nextAttemptAtMs: ms('next_attempt_at'),
  lastError: 'last_error',
  lastResponseStatus: 'last_response_status',
  workflowId: 'workflow_id',
  deliveredAtMs: ms('delivered_at'),
  createdAtMs: ms('created_at'),
  updatedAtMs: ms('updated_at'),
};
const INNER_COLUMNS = Object.entries(LISTED).map(([field, sql]) => `${sql} as "${field}"`).join(', ');
const OUTER_COLUMNS = Object.keys(LISTED).map((field) => `d."${field}"`).join(', ');

/**
 * The newest deliveries of many endpoints in one query: a lateral join walks the
 * (endpoint_id, created_at desc) index for each endpoint and stops after five, so the
 * cost does not grow with the history.
 */
export async function recentDeliveriesByEndpoint(
  em: EntityManager,
  endpointIds: string[],
): Promise<Map<string, ListedDelivery[]>> {
  const byEndpoint = new Map<string, ListedDelivery[]>(endpointIds.map((id) => [id, []]));
  if (endpointIds.length === 0) return byEndpoint;
  // The endpoint ids are the organization's own (the caller read them scoped to it). Filtering
  // on organization_id again made the planner misjudge small organizations in a large table
  // into plans costly enough to be JIT-compiled on every call.
  const rows = await em.execute<ListedDelivery[]>(
    `select ${OUTER_COLUMNS} from unnest(?::uuid[]) as e(id)
       cross join lateral (
         select ${INNER_COLUMNS}, created_at as sort_at from webhook_deliveries w
          where w.endpoint_id = e.id
          order by w.created_at desc, w.id desc
          limit ${RECENT_DELIVERIES}
       ) d
      order by d."endpointId", d.sort_at desc, d.id desc`,
    // The query builder would expand an array parameter into a list; pass one array literal of uuids.
    [`{${endpointIds.join(',')}}`],
  );
  for (const row of rows) byEndpoint.get(row.endpointId)?.push(row);
  return byEndpoint;
}

/** The listed form of a delivery entity. */
export function listedDelivery(d: WebhookDelivery): ListedDelivery {
  return {
    id: d.id,
    endpointId: d.endpointId,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    attemptCount: d.attemptCount,
    nextAttemptAtMs: d.nextAttemptAt ? d.nextAttemptAt.getTime() : null,
    lastError: d.lastError ?? null,
    lastResponseStatus: d.lastResponseStatus ?? null,
    workflowId: d.workflowId,
    deliveredAtMs: d.deliveredAt ? d.deliveredAt.getTime() : null,
    createdAtMs: d.createdAt.getTime(),
    updatedAtMs: d.updatedAt.getTime(),
  };
}
