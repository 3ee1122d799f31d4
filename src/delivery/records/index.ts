import type { DeliveryStatus, EntityManager } from '../../db';
import { DEFAULT_ENDPOINT_CONCURRENCY, RETRY_INTERVAL_MS } from '../../../workflows/policy';
import type { DeliveryRef } from '../contract';
import * as inserts from './inserts';
import * as killSwitches from './kill-switches';
import * as outcomes from './outcomes';
import * as queries from './queries';
import * as starts from './starts';
import * as health from './health';
import { FINAL_STATUSES, type ListedDelivery, type Schedule } from './rows';
import type { NewDelivery } from './inserts';
import type { KillSwitchState, ReleasedDelivery } from './kill-switches';
import type { AttemptKey, AttemptResultRecord, RecordedOutcome } from './outcomes';
import type { DeadLetterFilter, DeadLetterView, DeliveryLogFilter, DeliveryView, DeliveryWindow, EventDelivery } from './queries';
import type { AttemptStart, ClaimedDelivery, ClaimOptions } from './starts';
import type { FailingEndpoint, FailingThreshold } from './health';

export { OPEN_STATUSES, FINAL_STATUSES, RECOVERABLE_STATUSES, GLOBAL_SCOPE, INTERRUPTED_ATTEMPT, FAILING_PAUSE, type ListedDelivery } from './rows';
export type { NewDelivery } from './inserts';
export type { AttemptStart, PreviousSecret, ClaimOptions, ClaimedDelivery } from './starts';
export type { AttemptKey, AttemptResultRecord, RecordedOutcome } from './outcomes';
export type { KillSwitchState, ReleasedDelivery } from './kill-switches';
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
 * statements live in its parts (records/): inserts (record, resend), starts (claims and
 * beginAttempt), outcomes (dispatch marks, outcomes, hold, fail, deadLetter), kill
 * switches and release, and queries; rows holds what they share.
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
export class DeliveryRecords {
  private readonly schedule: Schedule;

  constructor(options: { now?: () => number; retryIntervalMs?: number; endpointConcurrency?: number } = {}) {
    this.schedule = {
      now: options.now ?? Date.now,
      retryIntervalMs: options.retryIntervalMs ?? RETRY_INTERVAL_MS,
      endpointConcurrency: options.endpointConcurrency ?? DEFAULT_ENDPOINT_CONCURRENCY,
    };
  }

  /**
   * Records deliveries, pending and due now, in one statement. (endpoint, event id) is
   * unique: a delivery that exists already is returned as it is, never made twice.
   */
  async record(em: EntityManager, deliveries: NewDelivery[]): Promise<ListedDelivery[]> {
    return inserts.record(em, this.schedule, deliveries);
  }

  /**
   * Starts a new series of attempts on a finished delivery, in the caller's transaction:
   * pending and due now, attempts counted from 0 again under the next series number, its
   * own workflow id, off the dead-letter queue. The event id, body and (endpoint, event id)
   * stay the delivery's. Only a delivery in one of `from` is resent; any other answers
   * with its status and is left as it is.
   */
  async resend(
    em: EntityManager,
    which: { deliveryId: string; organizationId: string; endpointId?: string },
    from: readonly DeliveryStatus[] = FINAL_STATUSES,
  ): Promise<{ resent: ListedDelivery } | { refused: DeliveryStatus } | null> {
    return inserts.resend(em, this.schedule, which, from);
  }

  /**
   * Embedded engine: leases up to `limit` due deliveries to `owner`, fairly across endpoints
   * and within each endpoint's free turns (ClaimOptions), skipping rows another instance is claiming right now and the ones this instance is
   * already working on, and begins the attempt of each in the same statement (what
   * beginAttempt would decide and write). A claimed delivery whose `start` is null needs
   * beginAttempt's transaction: an attempt of it was left dispatched but unfinished, or
   * another executor wrote to it meanwhile.
   */
  async claimDue(em: EntityManager, options: ClaimOptions): Promise<ClaimedDelivery[]> {
    return starts.claimDue(em, this.schedule, options);
  }

  /** Embedded engine: keeps a lease alive while its owner works; false when the owner lost it. */
  async renewLease(em: EntityManager, deliveryId: string, owner: string, leaseMs: number): Promise<boolean> {
    return starts.renewLease(em, this.schedule, deliveryId, owner, leaseMs);
  }

  /**
   * Active endpoints over the automatic pause's threshold: their last deliveries since their
   * last resume all failed, for long enough (at once after a 410 Gone). Reads only endpoints
   * with a dead letter or a 410 answer since `since`.
   */
  async failingEndpoints(em: EntityManager, since: Date, threshold: FailingThreshold): Promise<FailingEndpoint[]> {
    return health.failingEndpoints(em, new Date(this.schedule.now()), since, threshold);
  }

  /** Endpoints paused for failing whose test delivery was delivered since. */
  async recoveredEndpoints(em: EntityManager): Promise<{ endpointId: string; organizationId: string }[]> {
    return health.recoveredEndpoints(em);
  }

  /** A delivery's place among its endpoint's open deliveries (how many were recorded before it), counted up to `limit`. */
  async placeInLine(em: EntityManager, ref: DeliveryRef, limit: number): Promise<number> {
    return starts.placeInLine(em, ref, limit);
  }

  /** The endpoints' turns (DELIVERY_ENDPOINT_CONCURRENCY). */
  get endpointConcurrency(): number {
    return this.schedule.endpointConcurrency;
  }

  /** Embedded engine: gives a lease back, the delivery still due (its endpoint had no turn free). */
  async giveBackLease(em: EntityManager, deliveryId: string, owner: string): Promise<void> {
    return starts.giveBackLease(em, deliveryId, owner);
  }

  /**
   * Starts an attempt. Under a lock on the delivery row, decides what the attempt may do:
   * a finished delivery stays finished; a missing or disabled endpoint fails it; a kill
   * switch or a paused endpoint holds it without using an attempt; an endpoint with all its
   * turns in flight leaves it as it is (`turn`: try again shortly); otherwise the next attempt row is written
   * (or the one a dead worker wrote but never sent is taken over) and the caller sends.
   * One round trip on the common path.
   */
  async beginAttempt(em: EntityManager, ref: DeliveryRef): Promise<AttemptStart> {
    return starts.beginAttempt(em, this.schedule, ref);
  }

  /**
   * The connection to the receiver stands and the request is about to be written: from
   * here on the attempt counts. Refused (false) when a kill switch came on (or the endpoint
   * was paused) meanwhile, the delivery finished, or another executor took the attempt over;
   * then nothing is sent. Attempts of several deliveries (one each) go in one statement:
   * what a group commit of concurrent attempts writes. One answer per attempt, in their order.
   */
  async markAllDispatched(em: EntityManager, attempts: AttemptKey[]): Promise<boolean[]> {
    return outcomes.markAllDispatched(em, this.schedule, attempts);
  }

  /**
   * Writes an attempt's result: delivered, or retrying with the next attempt one interval
   * later (none after the last). Counted attempts only: a failure before anything reached
   * the receiver's network is not an attempt and is never recorded here. Idempotent: an
   * attempt another executor already closed as interrupted takes this real outcome instead,
   * unless a later attempt was sent meanwhile. One statement writes the attempt's row and
   * the delivery's together, or neither; attempts of several deliveries (one each) go in
   * that one statement: what a group commit of concurrent attempts writes. One answer per
   * attempt, in their order.
   */
  async recordOutcomes(em: EntityManager, results: AttemptResultRecord[]): Promise<RecordedOutcome[]> {
    return outcomes.recordOutcomes(em, this.schedule, results);
  }

  /** A kill switch is on or the endpoint paused: the delivery waits one interval (or until released) without using an attempt. */
  async hold(em: EntityManager, ref: DeliveryRef): Promise<void> {
    return outcomes.hold(em, this.schedule, ref);
  }

  /** The endpoint is missing or disabled: the delivery fails at once with the reason, never retried. */
  async fail(em: EntityManager, ref: DeliveryRef, reason: string): Promise<void> {
    return outcomes.fail(em, this.schedule, ref, reason);
  }

  /**
   * All attempts are used: the delivery is dead-lettered and queued for operators. False
   * when it had already finished. `reason`: a failure of ours ended it (not the receiver's);
   * it becomes the last error, and an attempt begun but never sent is closed with it, so it
   * never reads as a request that was made.
   */
  async deadLetter(em: EntityManager, ref: DeliveryRef, reason?: string): Promise<boolean> {
    return outcomes.deadLetter(em, this.schedule, ref, reason);
  }

  async readKillSwitch(em: EntityManager, scope: string): Promise<KillSwitchState> {
    return killSwitches.readKillSwitch(em, scope);
  }

  /** Sets a switch; turning one off releases what it held (releaseHeld) and returns those deliveries. */
  async writeKillSwitch(em: EntityManager, scope: string, enabled: boolean, reason: string): Promise<{ state: KillSwitchState; released: ReleasedDelivery[] }> {
    return killSwitches.writeKillSwitch(em, this.schedule, scope, enabled, reason);
  }

  /** Switches on now: the global one (0 or 1) and how many organizations'. */
  async killSwitchesOn(em: EntityManager): Promise<{ global: number; organizations: number }> {
    return killSwitches.killSwitchesOn(em);
  }

  /** A kill switch went off: the deliveries it held are due now. Returns them (Temporal signals their workflows). */
  async releaseHeld(em: EntityManager, scope: string): Promise<ReleasedDelivery[]> {
    return killSwitches.releaseHeld(em, this.schedule, scope);
  }

  /** An endpoint was resumed: its held deliveries are due now, as a kill switch's release makes them. Returns them. */
  async releaseHeldOfEndpoint(em: EntityManager, organizationId: string, endpointId: string): Promise<ReleasedDelivery[]> {
    return killSwitches.releaseHeldOfEndpoint(em, this.schedule, organizationId, endpointId);
  }

  /** Every delivery of the given events, each event's oldest endpoint first, with its endpoint's URL. */
  async listByEvents(em: EntityManager, events: { organizationId: string; eventId: string }[]): Promise<EventDelivery[]> {
    return queries.listByEvents(em, events);
  }

  /**
   * The newest deliveries (RECENT_DELIVERIES) of many endpoints in one query, whatever
   * their history. The ids are the organization's own (the caller read them scoped to it).
   */
  async listRecent(em: EntityManager, endpointIds: string[]): Promise<Map<string, ListedDelivery[]>> {
    return queries.listRecent(em, endpointIds);
  }

  /**
   * An endpoint's delivery log, newest first (created_at, then id, both descending);
   * `before` continues after the last delivery of the previous page.
   */
  async listForEndpoint(em: EntityManager, filter: DeliveryLogFilter): Promise<ListedDelivery[]> {
    return queries.listForEndpoint(em, filter);
  }

  /** A delivery with every attempt, for operators: by id, or by endpoint and event id. */
  async lookup(em: EntityManager, by: { deliveryId: string } | { endpointId: string; eventId: string }): Promise<DeliveryView | null> {
    return queries.lookup(em, by);
  }

  /** How many of an endpoint's deliveries recorded in [since, until) are in one of `statuses`. */
  async countInWindow(em: EntityManager, window: DeliveryWindow, statuses: readonly DeliveryStatus[]): Promise<number> {
    return queries.countInWindow(em, window, statuses);
  }

  /** The next `limit` of an endpoint's deliveries in [since, until) in one of `statuses`, oldest first, after `after`. */
  async nextInWindow(
    em: EntityManager,
    window: DeliveryWindow,
    statuses: readonly DeliveryStatus[],
    after: { at: Date; id: string } | null,
    limit: number,
  ): Promise<{ id: string; createdAtMs: number }[]> {
    return queries.nextInWindow(em, window, statuses, after, limit);
  }

  /** The dead-letter queue, newest first. */
  async listDeadLetters(em: EntityManager, filter: DeadLetterFilter): Promise<DeadLetterView[]> {
    return queries.listDeadLetters(em, filter);
  }

  async deadLetterCount(em: EntityManager): Promise<number> {
    return queries.deadLetterCount(em);
  }

  /** Seconds the oldest due delivery has waited (0 when none is due): how far the engine is behind. */
  async lagSeconds(em: EntityManager): Promise<number> {
    return queries.lagSeconds(em, this.schedule);
  }

  /** Temporal: deliveries still pending since before `cutoff` (their start may have failed), a page after `after`, oldest first. */
  async pendingSince(em: EntityManager, cutoff: Date, limit: number, after?: queries.PendingCursor): Promise<queries.PendingDelivery[]> {
    return queries.pendingSince(em, cutoff, limit, after);
  }
}
