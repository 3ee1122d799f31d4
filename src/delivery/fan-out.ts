import { sql, type RawBuilder } from 'kysely';
import type { EventDelivery } from './records';

/** The event of deliveries fanOutInsertSql recorded, with its workflowIdParts. */
export interface FannedOutEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  workflowHead: string;
  workflowTail: string;
}

/**
 * The deliveries' part of a statement that records events: an insert to place as a CTE
 * body in its WITH list. It reads the caller's CTE named `source`, one row per delivery
 * to record: (id, organization_id, endpoint_id, event_id, event_type, body, workflow_head,
 * workflow_tail, sendable, refusal), where id is a new uuid (gen_random_uuid() in a
 * materialized CTE, so that the caller's answer reads the same one), body is the exact JSON
 * sent on every attempt and workflow_head/tail come from workflowIdParts. A sendable
 * delivery is recorded pending and due at `now`, the others failed with their refusal, so
 * none is silently dropped. The events must be new: a delivery that exists already for
 * (endpoint, event id) fails the statement on DELIVERY_EVENT_UNIQUE, and it writes nothing
 * (no ON CONFLICT: its check per row cost a fifth of PostgreSQL's throughput on this
 * insert). So every row of `source` is recorded as it is, and the caller answers from it
 * (fannedOutDelivery): nothing is returned or read back.
 */
export function fanOutInsertSql(source: string, now: Date): RawBuilder<never> {
  return sql<never>`insert into webhook_deliveries
      (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at, last_error, workflow_id, created_at, updated_at)
    select s.id, s.organization_id, s.endpoint_id, s.event_id, s.event_type, s.body,
           case when s.sendable then 'pending' else 'failed' end, 0,
           case when s.sendable then ${now}::timestamptz end,
           case when s.sendable then null else s.refusal end,
           s.workflow_head || s.endpoint_id::text || s.workflow_tail, ${now}::timestamptz, ${now}::timestamptz
      from ${sql.table(source)} s`;
}

/** Deliveries are unique per endpoint and event id: the constraint a second one violates. */
export const DELIVERY_EVENT_UNIQUE = 'webhook_deliveries_event_unique';

/** A row of fanOutInsertSql's source, as far as the answer needs it. */
export interface FannedOutRow {
  id: string;
  endpointId: string;
  sendable: boolean;
}

/** A delivery fanOutInsertSql recorded at `at` (epoch ms), as the answer shows it: the row as stored, from what the caller holds. */
export function fannedOutDelivery(row: FannedOutRow, event: FannedOutEvent, endpointUrl: string, refusal: string, at: number): EventDelivery {
  const pending = row.sendable;
  return {
    id: row.id,
    organizationId: event.organizationId,
    endpointId: row.endpointId,
    eventId: event.eventId,
    eventType: event.eventType,
    status: pending ? 'pending' : 'failed',
    attemptCount: 0,
    nextAttemptAtMs: pending ? at : null,
    lastError: pending ? null : refusal,
    lastResponseStatus: null,
    workflowId: event.workflowHead + row.endpointId + event.workflowTail,
    deliveredAtMs: null,
    createdAtMs: at,
    updatedAtMs: at,
    series: 1,
    endpointUrl,
  };
}
