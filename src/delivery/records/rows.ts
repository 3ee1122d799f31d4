import { sql, type Expression, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import {
  epochMs,
  type EntityManager,
  type DeadLetterSchema,
  type DeliveryAttemptSchema,
  type DeliveryStatus,
  type KillSwitchSchema,
  type PayloadRemoval,
  type WebhookDeliverySchema,
  type WebhookEndpointSchema,
} from '../../db';

/**
 * What every part of DeliveryRecords (index.ts) shares: the tables as Kysely types
 * them, the status lists, the schedule the records keep (the `this` of their methods), a
 * delivery as lists show it, and the condition that stops sending (a kill switch or a
 * paused endpoint).
 *
 * Timestamps are read as epoch milliseconds (epochMs): the driver hands timestamptz columns
 * to MikroORM as text, and a number typed in SQL cannot be mistaken for a Date.
 */

/** Statuses in which a delivery still has work to do. */
export const OPEN_STATUSES = ['pending', 'retrying', 'held'] as const satisfies readonly DeliveryStatus[];
/** Statuses a delivery leaves only by a resend. */
export const FINAL_STATUSES = ['delivered', 'dead_lettered', 'failed'] as const satisfies readonly DeliveryStatus[];
/** Statuses of the deliveries a recovery resends: the ones the receiver never took. */
export const RECOVERABLE_STATUSES = ['dead_lettered', 'failed'] as const satisfies readonly DeliveryStatus[];

/** The scope of the kill switch that stops every organization. */
export const GLOBAL_SCOPE = 'global';

/** last_error of an attempt whose outcome was lost with the process that made it. */
export const INTERRUPTED_ATTEMPT = 'The attempt was interrupted after its request was sent; its outcome is unknown.';

/** The tables the records write, and the endpoints they read. */
export type Tables = InferKyselyDB<
  | typeof WebhookDeliverySchema
  | typeof DeliveryAttemptSchema
  | typeof DeadLetterSchema
  | typeof KillSwitchSchema
  | typeof WebhookEndpointSchema
>;

export function db(em: EntityManager): Kysely<Tables> {
  return em.getKysely<Tables>();
}

/** The clock every transition reads, and how long a failed or held delivery waits for its next attempt. */
export interface Schedule {
  now: () => number;
  retryIntervalMs: number;
  /** Attempts one endpoint may have in flight at once (its turns). */
  endpointConcurrency: number;
}

/**
 * What a method of DeliveryRecords reads besides its arguments: `this` of every method of
 * the parts (index.ts puts them on its prototype), so a method called off its records, where
 * `this` would be lost, does not compile.
 */
export interface RecordsContext {
  readonly schedule: Schedule;
}

/** A delivery as lists show it: the listed fields only (never the payload), timestamps as epoch milliseconds. */
export interface ListedDelivery {
  id: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  status: DeliveryStatus;
  attemptCount: number;
  nextAttemptAtMs: number | null;
  lastError: string | null;
  lastResponseStatus: number | null;
  workflowId: string;
  deliveredAtMs: number | null;
  createdAtMs: number;
  updatedAtMs: number;
  /** The series of attempts the delivery is in: 1, and one more for each resend. */
  series: number;
  /**
   * Why the payload is no longer stored (past its retention, or erased on request), and
   * since when; null while it is kept. Left out where the delivery was just recorded.
   */
  payloadRemoved?: PayloadRemoval | null;
  payloadRemovedAtMs?: number | null;
}

/** What an answer says of a delivery's payload: "available", or why it is gone ("expired", "erased"). */
export function payloadStateOf(d: Pick<ListedDelivery, 'payloadRemoved'>): 'available' | PayloadRemoval {
  return d.payloadRemoved ?? 'available';
}

/**
 * The columns of a ListedDelivery, read from `webhook_deliveries as w`, but for what says its
 * payload is gone: what a publish answers of the deliveries it just recorded.
 */
export const recordedColumns = [
  'w.id as id',
  'w.endpoint_id as endpointId',
  'w.event_id as eventId',
  'w.event_type as eventType',
  'w.status as status',
  'w.attempt_count as attemptCount',
  // While an attempt of its series is under way there is no next attempt to show: the row
  // still holds the time this one was due, in the past by then (on both engines).
  sql<number | null>`case when exists (select 1 from delivery_attempts a where a.delivery_id = w.id and a.series = w.series and a.finished_at is null)
    then null else floor(extract(epoch from w.next_attempt_at) * 1000)::float8 end`.as('nextAttemptAtMs'),
  'w.last_error as lastError',
  'w.last_response_status as lastResponseStatus',
  'w.workflow_id as workflowId',
  epochMs<number | null>('w.delivered_at').as('deliveredAtMs'),
  epochMs('w.created_at').as('createdAtMs'),
  epochMs('w.updated_at').as('updatedAtMs'),
  'w.series as series',
] as const;

/** The columns of a ListedDelivery, read from `webhook_deliveries as w`. */
export const listedColumns = [
  ...recordedColumns,
  'w.payload_removed as payloadRemoved',
  epochMs<number | null>('w.payload_removed_at').as('payloadRemovedAtMs'),
] as const;

export function listedQuery(k: Kysely<Tables>) {
  return k.selectFrom('webhook_deliveries as w').select(listedColumns);
}

/**
 * True while a kill switch stops the organization, or the endpoint is paused, whose ids the
 * expressions name; an endpoint paused for failing still takes its test deliveries.
 */
export function stoppedBy(organizationId: Expression<string>, endpointId: Expression<string>, eventType: Expression<string>) {
  return sql<boolean>`(exists (select 1 from kill_switches k where k.enabled and k.scope in (${GLOBAL_SCOPE}, ${organizationId}::text))
    or exists (select 1 from webhook_endpoints p where p.id = ${endpointId} and p.paused_at is not null
      and (p.pause_reason is distinct from ${FAILING_PAUSE} or ${eventType} <> ${TEST_EVENT_TYPE})))`;
}

/** An endpoint the service paused because its deliveries kept failing: a test delivery still goes out, and its success lifts the pause. */
export const FAILING_PAUSE = 'failing';
const TEST_EVENT_TYPE = 'webhook.test';
