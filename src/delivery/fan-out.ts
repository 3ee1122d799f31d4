import { sql, type ExpressionBuilder, type QueryCreator, type RawBuilder } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { epochMs, statementPart, type DeliveryStatus, type WebhookDeliverySchema } from '../db';
import type { EventDelivery } from './records';

/**
 * The deliveries' part of a statement that records events and fans them out (the
 * publisher's): the insert, and how its rows go into the statement's answer.
 */

/**
 * One delivery to record, as the caller's CTE `fan_out` holds it. `body` is the exact JSON
 * sent on every attempt; `workflow_head` and `workflow_tail` are workflowIdParts of the
 * event, the delivery's workflow id around its endpoint id. A `sendable` delivery is recorded
 * pending and due at once, any other failed with its `refusal`, so none is silently dropped.
 */
export interface FanOutRow {
  /** The new delivery's id (gen_random_uuid() in the caller's CTE, which the statement reads twice and so materializes once). */
  id: string;
  organization_id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  body: string;
  workflow_head: string;
  workflow_tail: string;
  sendable: boolean;
  refusal: string;
}

type Tables = InferKyselyDB<typeof WebhookDeliverySchema> & { fan_out: FanOutRow };

/**
 * The insert of the deliveries in `fan_out`, at `now`, to place as a CTE in the caller's
 * WITH list; it returns each delivery recorded, with the columns an answer shows (deliveredJson).
 * The events must be new: a delivery that exists already for (endpoint, event id) fails the
 * statement on DELIVERY_EVENT_UNIQUE, and it writes nothing (no ON CONFLICT: its check per row
 * cost a fifth of PostgreSQL's throughput on this insert).
 */
export const fanOutInsert = statementPart((qc: QueryCreator<Tables>, now: Date) =>
  qc
    .insertInto('webhook_deliveries')
    .columns([
      'id',
      'organization_id',
      'endpoint_id',
      'event_id',
      'event_type',
      'payload',
      'status',
      'series',
      'attempt_count',
      'next_attempt_at',
      'last_error',
      'workflow_id',
      'created_at',
      'updated_at',
    ])
    .expression((eb) =>
      eb
        .selectFrom('fan_out as s')
        .select((s) => [
          's.id',
          's.organization_id',
          's.endpoint_id',
          's.event_id',
          's.event_type',
          's.body',
          sql<DeliveryStatus>`case when ${s.ref('s.sendable')} then 'pending' else 'failed' end`.as('status'),
          sql<number>`1`.as('series'),
          sql<number>`0`.as('attempt_count'),
          sql<Date | null>`case when ${s.ref('s.sendable')} then ${now}::timestamptz end`.as('next_attempt_at'),
          sql<string | null>`case when ${s.ref('s.sendable')} then null else ${s.ref('s.refusal')} end`.as('last_error'),
          sql<string>`${s.ref('s.workflow_head')} || ${s.ref('s.endpoint_id')}::text || ${s.ref('s.workflow_tail')}`.as('workflow_id'),
          sql<Date>`${now}::timestamptz`.as('created_at'),
          sql<Date>`${now}::timestamptz`.as('updated_at'),
        ]),
    )
    .returning([
      'id',
      'organization_id as organizationId',
      'endpoint_id as endpointId',
      'event_id as eventId',
      'event_type as eventType',
      'status',
      'attempt_count as attemptCount',
      epochMs<number | null>('next_attempt_at').as('nextAttemptAtMs'),
      'last_error as lastError',
      'last_response_status as lastResponseStatus',
      'workflow_id as workflowId',
      epochMs<number | null>('delivered_at').as('deliveredAtMs'),
      epochMs('created_at').as('createdAtMs'),
      epochMs('updated_at').as('updatedAtMs'),
      'series',
    ]),
);

/**
 * What fanOutInsert returns of each delivery it recorded, as the answer shows it: the CTE the
 * caller names `delivered`. A delivery just recorded holds its payload, so nothing says it is gone.
 */
export type DeliveredRow = Omit<EventDelivery, 'endpointUrl' | 'payloadRemoved' | 'payloadRemovedAtMs'>;

/** DeliveredRow's fields in the order deliveredJson puts them in its array. */
const DELIVERED_FIELDS = [
  'id',
  'organizationId',
  'endpointId',
  'eventId',
  'eventType',
  'status',
  'attemptCount',
  'nextAttemptAtMs',
  'lastError',
  'lastResponseStatus',
  'workflowId',
  'deliveredAtMs',
  'createdAtMs',
  'updatedAtMs',
  'series',
] as const satisfies readonly (keyof DeliveredRow)[];
/** Fails to compile while a field of DeliveredRow is missing from DELIVERED_FIELDS. */
const everyField: Exclude<keyof DeliveredRow, (typeof DELIVERED_FIELDS)[number]> extends never ? true : never = true;
void everyField;

/** A recorded delivery in a statement's JSON answer: DELIVERED_FIELDS' values (deliveredOf reads it). */
export type DeliveredJson = unknown[];

/**
 * A delivery fanOutInsert returned, from the caller's CTE `delivered`, as a JSON array for
 * the caller's json_agg: the answer is read from the rows as stored. (The caller pairs each
 * with its endpoint's URL by id rather than joining `delivered` back to its source in SQL:
 * PostgreSQL knows neither CTE's size and planned that join as a nested loop, 100 × 100 rows
 * for a publish to 100 endpoints.)
 */
export function deliveredJson<DB extends { delivered: DeliveredRow }>(eb: ExpressionBuilder<DB, 'delivered'>): RawBuilder<DeliveredJson> {
  const d = eb as unknown as ExpressionBuilder<{ delivered: DeliveredRow }, 'delivered'>;
  return sql<DeliveredJson>`json_build_array(${sql.join(DELIVERED_FIELDS.map((field) => d.ref(`delivered.${field}`)))})`;
}

/** A delivery of deliveredJson's array, with its endpoint's URL. */
export function deliveredOf(values: DeliveredJson, endpointUrl: string): EventDelivery {
  const delivery: Record<string, unknown> = {};
  DELIVERED_FIELDS.forEach((field, i) => (delivery[field] = values[i]));
  delivery.endpointUrl = endpointUrl;
  return delivery as unknown as EventDelivery;
}

/** Deliveries are unique per endpoint and event id: the constraint a second one violates. */
export const DELIVERY_EVENT_UNIQUE = 'webhook_deliveries_event_unique';
