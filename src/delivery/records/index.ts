import { DEFAULT_ENDPOINT_CONCURRENCY, RETRY_INTERVAL_MS } from '../../../workflows/policy';
import { healthMethods } from './health';
import { insertMethods } from './inserts';
import { killSwitchMethods } from './kill-switches';
import { outcomeMethods } from './outcomes';
import { queryMethods } from './queries';
import { retentionMethods } from './retention';
import type { RecordsContext, Schedule } from './rows';
import { startMethods } from './starts';
import { turnMethods } from './turns';

export { OPEN_STATUSES, FINAL_STATUSES, RECOVERABLE_STATUSES, GLOBAL_SCOPE, INTERRUPTED_ATTEMPT, FAILING_PAUSE, payloadStateOf, type ListedDelivery } from './rows';
export type { NewDelivery } from './inserts';
export type { AttemptStart, PreviousSecret, ClaimOptions, ClaimedDelivery } from './starts';
export type { AttemptKey, AttemptResultRecord, RecordedOutcome } from './outcomes';
export type { KillSwitchState, ReleasedDelivery } from './kill-switches';
export type { ErasureCounts, ErasureCursor, ErasureScope, RetentionCte } from './retention';
export type { FailingEndpoint, FailingThreshold } from './health';
export {
  RECENT_DELIVERIES,
  type EventDelivery,
  type AttemptView,
  type DeliveryView,
  type DeliveryLogFilter,
  type DeliveryWindow,
  type DeadLetterFilter,
  type DeadLetterView,
} from './queries';

/**
 * The only code that changes delivery rows and reads or writes their attempts, the
 * dead-letter queue and the kill switches (a publish's new rows are inserted by the delivery
 * module's part of its statement, fan-out.ts). Each transition of a delivery is one named method here; both
 * engines and every service go through them, so the state machine has one door. The
 * methods live in its parts (records/), each documented where it is written: inserts
 * (record, resend), starts (claims and beginAttempt), turns (an endpoint's line on Temporal), outcomes (dispatch marks, outcomes,
 * hold, fail, deadLetter), kill switches and release, queries, health (the automatic
 * pause's reads) and retention (expiry and erasure); rows holds what they share. This class
 * holds the schedule and puts the parts' methods on its prototype: each is typed
 * `this: RecordsContext`, so the compiler checks every signature and refuses a method
 * called off its records.
 *
 *   pending/retrying/held ──claimDue──► (leased) ──beginAttempt──► send | held | failed | exhausted
 *   (the embedded engine's claimDue leases and begins in one statement)
 *   send ──markAllDispatched──► (counted) ──recordOutcomes──► delivered | retrying | (8th) → deadLetter
 *   held ──releaseHeld / releaseHeldOfEndpoint──► due now
 *
 * An attempt counts (attempt_count) once its request may have reached the receiver, or
 * once it failed on the receiver's side of the network (DNS, connect, TLS): never for a
 * failure of ours (PostgreSQL unreachable, a worker that died before sending).
 *
 * One per process (server/dependencies.ts, worker-main.ts), handed to everything that
 * needs it, the attempts included: its clock and retry interval are the ones every
 * transition reads.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- the interface below declares the parts' methods, and Object.assign puts them on the prototype
export class DeliveryRecords implements RecordsContext {
  readonly schedule: Schedule;

  constructor(options: { now?: () => number; retryIntervalMs?: number; endpointConcurrency?: number } = {}) {
    this.schedule = {
      now: options.now ?? Date.now,
      retryIntervalMs: options.retryIntervalMs ?? RETRY_INTERVAL_MS,
      endpointConcurrency: options.endpointConcurrency ?? DEFAULT_ENDPOINT_CONCURRENCY,
    };
  }

  /** The endpoints' turns (DELIVERY_ENDPOINT_CONCURRENCY). */
  get endpointConcurrency(): number {
    return this.schedule.endpointConcurrency;
  }
}

type InsertMethods = typeof insertMethods;
type StartMethods = typeof startMethods;
type OutcomeMethods = typeof outcomeMethods;
type KillSwitchMethods = typeof killSwitchMethods;
type QueryMethods = typeof queryMethods;
type HealthMethods = typeof healthMethods;
type RetentionMethods = typeof retentionMethods;
type TurnMethods = typeof turnMethods;

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- the parts' methods, declared on the class; the assignment below puts them there
export interface DeliveryRecords extends InsertMethods, StartMethods, OutcomeMethods, KillSwitchMethods, QueryMethods, HealthMethods, RetentionMethods, TurnMethods {}
Object.assign(DeliveryRecords.prototype, insertMethods, startMethods, outcomeMethods, killSwitchMethods, queryMethods, healthMethods, retentionMethods, turnMethods);
