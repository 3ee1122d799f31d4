/**
 * What the delivery engines (Temporal and embedded) and the activities agree on.
 * Workflow code imports only its types; the constants live in workflows/policy.ts.
 */

/** Identifies one delivery: one event to one endpoint. */
export interface DeliveryRef {
  deliveryId: string;
  organizationId: string;
  endpointId: string;
  eventId: string;
}

/**
 * Outcome of one call of the attempt activity that did not throw.
 * - delivered: a 2xx arrived; the row is marked delivered.
 * - held: a kill switch is on or the endpoint is paused; nothing was sent and no attempt was used. `sent` is how
 *   many attempts the delivery had made (absent in histories written before it existed).
 * - turn: the endpoint has as many attempts in flight as it may; nothing was sent and no
 *   attempt was used: the workflow waits about `waitMs` (set from the delivery's place in the
 *   endpoint's line) and asks again.
 * A failed attempt throws instead, with details `[{ sent }]`: a retryable failure
 * ("DeliveryAttemptFailed"), or a non-retryable one ("EndpointGone" when the endpoint is
 * missing or disabled: the row is already marked failed with the reason;
 * "AttemptsExhausted" once the delivery has made all its attempts).
 */
export type AttemptOutcome = { kind: 'delivered'; attempt: number; status: number } | { kind: 'held'; sent?: number } | { kind: 'turn'; sent: number; waitMs: number };

/** The activities both engines run, with the same policy constants. */
export interface DeliveryActivities {
  /** Makes one attempt: checks endpoint and kill switch, signs, POSTs, records the result on the row. */
  attemptDelivery(ref: DeliveryRef): Promise<AttemptOutcome>;
  /** Marks the delivery dead-lettered and puts it on the dead-letter queue. */
  deadLetter(ref: DeliveryRef): Promise<void>;
}

export { FAILURE_TYPES } from '../../workflows/policy';

/** Extra facts about a delivery that help operators find it (Temporal memo, logs). */
export interface DeliveryMeta {
  eventType: string;
  /** Host of the endpoint URL, never the path or query (they may carry tokens). */
  targetHost: string;
  /** The delivery's series of attempts (a resend starts the next); 1 when absent. */
  series?: number;
}

/** Starts deliveries. Starting the same delivery twice is a no-op. */
export interface DeliveryEngine {
  start(ref: DeliveryRef, meta: DeliveryMeta): Promise<{ workflowId: string }>;
  /** A kill switch went off or an endpoint was resumed: the held deliveries released (already due in their rows) go out now. */
  release(released: { deliveryId: string; workflowId: string }[]): Promise<void>;
  close(): Promise<void>;
}
