import { setTimeout as sleep } from 'node:timers/promises';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { RESPONSE_EXCERPT_LENGTH, type AttemptErrorClass, type EntityManager, type MikroORM, isDatabaseUnavailable } from '../db';
import type { Logger, Config } from '../config';
import { FAILURE_TYPES, HEARTBEAT_INTERVAL_MS, RELEASE_SIGNAL, TURN_FRONT_ROUNDS, TURN_PLACE_LIMIT, TURN_WAIT_MAX_MS, TURN_WAIT_MIN_MS, TURN_WAIT_ROUND_MS } from '../../workflows/policy';
import { SecretBox } from '../secrets';
import type { AttemptOutcome, DeliveryActivities, DeliveryRef } from './contract';
import { OutboundError, createOutboundClient, type OutboundClient, type OutboundErrorKind } from '../outbound';
import { deliveryHeaders, overlapRunning, type DeliverySigning } from '../signatures';
import type { AttemptKey, AttemptResultRecord, AttemptStart, DeliveryRecords, RecordedOutcome } from './records';
import { GroupCommit } from './group-commit';
import { inDeliverySpan, noteInSpan, tracedOutbound } from '../tracing';
import { retryAfterSeconds } from './receiver-answer';

export type DeliveryEvent = 'attempt_delivered' | 'attempt_failed' | 'held' | 'endpoint_gone' | 'dead_lettered';

export interface ActivityDeps {
  orm: MikroORM;
  /** The process's one DeliveryRecords: its clock and retry interval are the ones every attempt's rows are written with. */
  records: DeliveryRecords;
  secrets: SecretBox;
  outbound: OutboundClient;
  logger: Logger;
  /** The clock an attempt signs and waits by: the one the records were given. */
  now?: () => number;
  /** Told what happened to each delivery, for metrics. */
  onEvent?: (event: DeliveryEvent) => void;
}

/** How an attempt shows it is alive, and how it is told to stop. */
export interface AttemptLiveness {
  /** Called every HEARTBEAT_INTERVAL_MS while the attempt runs: a Temporal heartbeat, or an embedded lease renewal. */
  heartbeat(): void;
  /** Aborted when the attempt must stop: Temporal cancelled the activity, or the engine is closing. */
  signal: AbortSignal;
}

/** What one run of an attempt came to. */
export type AttemptResult =
  | { kind: 'delivered'; attempt: number; status: number }
  /** A counted attempt failed; `exhausted` after the last one. */
  | { kind: 'failed'; sent: number; exhausted: boolean; error: string }
  | { kind: 'held'; sent: number }
  /** The endpoint's turns are all in flight: nothing was written or sent; the engine tries again after about `waitMs`. */
  | { kind: 'turn'; sent: number; waitMs: number }
  | { kind: 'gone'; reason: string }
  | { kind: 'exhausted'; sent: number }
  /** Another executor closed this attempt and went on (this one had been taken for dead). */
  | { kind: 'superseded' }
  /** A failure of ours no retry can fix: the delivery is dead-lettered with `reason`, no attempt used. */
  | { kind: 'abandoned'; reason: string };

/** The class of a failed attempt's outbound error, as the delivery log shows it (`aborted` after sending: the connection broke). */
const ERROR_CLASS_OF: Record<OutboundErrorKind, AttemptErrorClass> = {
  invalid_url: 'invalid_url',
  blocked_address: 'address_refused',
  dns: 'dns',
  timeout: 'timeout',
  tls: 'tls',
  connection: 'connection',
  aborted: 'connection',
  not_sent: 'connection',
};

/** The start of a receiver's answer as stored with its attempt: text, cut to the column's bound. */
function excerptOf(body: Buffer): string | null {
  if (body.length === 0) return null;
  // Four bytes per character at most: decoding this much always yields enough characters.
  return body.subarray(0, RESPONSE_EXCERPT_LENGTH * 4).toString('utf8').slice(0, RESPONSE_EXCERPT_LENGTH);
}

/** A waiting delivery's fallback wait on Temporal, from the rounds of turns ahead of it (workflows/policy.ts). */
export function turnWait(rounds: number): number {
  return rounds < TURN_FRONT_ROUNDS ? TURN_WAIT_MIN_MS * (1 + rounds) : Math.min(TURN_WAIT_MAX_MS, TURN_WAIT_ROUND_MS * rounds);
}

/** Backoff while PostgreSQL is unreachable: short at first, never longer than a heartbeat interval. */
const BOOKKEEPING_BACKOFF_MS = [100, 250, 500, 1000, 2000, HEARTBEAT_INTERVAL_MS] as const;

/**
 * One delivery attempt, as both engines make it: the Temporal activity below and the
 * embedded engine call `run` with their own liveness. The delivery row is the source of
 * truth (records/): every attempt is numbered from it and written back to it.
 *
 * Failures of ours never use one of the 8 attempts: PostgreSQL unreachable before the
 * request leaves is waited out (the attempt heartbeats meanwhile), and the attempt is
 * counted only once the request is about to be written (markAllDispatched) or failed on the
 * receiver's side of the network. An outcome that did come back is kept and its recording
 * retried until PostgreSQL answers, for as long as this process lives.
 */
export class DeliveryAttempts {
  readonly records: DeliveryRecords;
  /** Dispatch marks and outcomes of concurrent attempts, written together (group commit). */
  private readonly dispatches: GroupCommit<AttemptKey, boolean>;
  private readonly outcomes: GroupCommit<AttemptResultRecord, RecordedOutcome>;

  constructor(private readonly deps: ActivityDeps) {
    this.records = deps.records;
    const byDelivery = (a: AttemptKey) => a.ref.deliveryId;
    // One statement in flight each: the marks and outcomes that arrive meanwhile go together in
    // the next. Four dispatch marks in flight (so that fewer receiver connections wait) made
    // more, smaller statements, and the engine delivered about a third less on the bench
    // (1,000-1,250 against 1,480-1,510 deliveries/s, bench/README.md).
    this.dispatches = new GroupCommit((keys) => this.records.markAllDispatched(deps.orm.em.fork(), keys), byDelivery);
    this.outcomes = new GroupCommit<AttemptResultRecord, RecordedOutcome>((results) => this.records.recordOutcomes(deps.orm.em.fork(), results), byDelivery);
  }

  /** `begun`: the attempt as the embedded engine's claim began it (claimDue), instead of a beginAttempt of its own. */
  async run(ref: DeliveryRef, liveness: AttemptLiveness, begun?: AttemptStart): Promise<AttemptResult> {
    return inDeliverySpan('delivery.attempt', ref, async (span) => {
      const beat = setInterval(() => liveness.heartbeat(), HEARTBEAT_INTERVAL_MS);
      const progress = { sent: false };
      try {
        const result = await this.attempt(ref, liveness, begun, progress).catch((error: unknown) => {
          if (failureClass(error) !== 'permanent') throw error;
          return this.abandon(ref, error, liveness.signal, progress.sent);
        });
        span.set({ 'publishing.outcome': result.kind });
        if (result.kind === 'failed' || result.kind === 'gone' || result.kind === 'abandoned') span.fail(result.kind === 'failed' ? result.error : result.reason);
        return result;
      } finally {
        clearInterval(beat);
      }
    });
  }

  /**
   * Ends a delivery that failed for a reason of ours no retry can fix, as dead-lettered with
   * a reason that says so. Retrying would fail the same way forever (a Temporal workflow
   * topping up attempts that never send, an embedded lease re-begun after every lapse).
   * `sent`: the request had been written when it failed, so the receiver may have it; the
   * reason says so, and the attempt stays counted.
   */
  private async abandon(ref: DeliveryRef, error: unknown, signal: AbortSignal, sent: boolean): Promise<AttemptResult> {
    const reason = sent
      ? `Sent, then failed on our side before its outcome was recorded (${describeFailure(error)}); the receiver may have it, so no retry follows. An operator can find the cause in the logs by delivery id.`
      : `Not sent: the delivery failed on our side (${describeFailure(error)}); no attempt was used. An operator can find the cause in the logs by delivery id.`;
    this.deps.logger.error({ err: error, deliveryId: ref.deliveryId }, 'delivery dead-lettered by a failure of ours');
    const recorded = await inDeliverySpan('delivery.dead_letter', ref, () => this.untilRecorded(() => this.records.deadLetter(this.deps.orm.em.fork(), ref, { reason }), signal));
    if (recorded) this.deps.onEvent?.('dead_lettered');
    return { kind: 'abandoned', reason };
  }

  /**
   * Dead-letters a delivery whose attempts are used up; waits out PostgreSQL being unreachable.
   * `workflowId`: the workflow whose attempts they were (on Temporal); a resend's series begun
   * since is left alone.
   */
  async deadLetter(ref: DeliveryRef, signal?: AbortSignal, workflowId?: string): Promise<void> {
    const em = this.deps.orm.em.fork();
    const recorded = await inDeliverySpan('delivery.dead_letter', ref, () => this.untilRecorded(() => this.records.deadLetter(em, ref, { workflowId }), signal));
    if (recorded) this.deps.onEvent?.('dead_lettered');
  }

  /** `progress.sent` turns true once a request is about to be written: a failure from there on may follow a delivery the receiver has. */
  private async attempt(ref: DeliveryRef, liveness: AttemptLiveness, begun: AttemptStart | undefined, progress: { sent: boolean }): Promise<AttemptResult> {
    // Forked only for an attempt the engine's claim did not begin: most never need one.
    let em: EntityManager | undefined;
    const now = this.deps.now ?? Date.now;
    for (;;) {
      const start = begun ?? (await this.untilRecorded(() => this.records.beginAttempt((em ??= this.deps.orm.em.fork()), ref), liveness.signal));
      begun = undefined;
      switch (start.kind) {
        case 'delivered':
          return start;
        case 'gone':
          this.deps.onEvent?.('endpoint_gone');
          return start;
        case 'held':
          this.deps.onEvent?.('held');
          return start;
        case 'turn': {
          const ahead = await this.untilRecorded(() => this.records.placeInLine((em ??= this.deps.orm.em.fork()), ref, TURN_PLACE_LIMIT), liveness.signal);
          const rounds = Math.floor(ahead / this.records.endpointConcurrency);
          return { kind: 'turn', sent: start.sent, waitMs: turnWait(rounds) };
        }
        case 'exhausted':
          return start;
        case 'wait':
          await sleep(Math.max(0, start.until.getTime() - now()), undefined, { signal: liveness.signal });
          continue;
        case 'send':
          break;
      }

      noteInSpan({ 'publishing.attempt': start.attempt });
      const signedAt = now();
      const headers = deliveryHeaders(this.signingOf(start, signedAt), ref.deliveryId, start.payload, signedAt);
      let refusedBeforeSend = false;
      let status: number | null = null;
      let error: string | null = null;
      let errorClass: AttemptErrorClass | null = null;
      let excerpt: string | null = null;
      let retryAfter: number | null = null;
      try {
        const response = await this.deps.outbound.post(start.url, headers, start.payload, {
          signal: liveness.signal,
          beforeSend: async () => {
            const marked = await this.dispatches.submit({ ref, attempt: start.attempt, startedAt: start.startedAt });
            refusedBeforeSend = !marked;
            progress.sent = marked;
            return marked;
          },
        });
        status = response.status;
        excerpt = excerptOf(response.body);
        retryAfter = retryAfterSeconds(status, response.retryAfter, now());
        if (status < 200 || status >= 300) {
          error = `The endpoint answered HTTP ${status}.`;
          errorClass = 'http_status';
        }
      } catch (cause) {
        if (!(cause instanceof OutboundError)) throw cause;
        if (cause.kind === 'not_sent') {
          // PostgreSQL could not mark the attempt sent, or a kill switch came on or the endpoint
          // was paused, the delivery finished or another executor took it: nothing left, so
          // nothing counts. Decide again.
          if (!refusedBeforeSend) await this.pause(0, liveness.signal);
          continue;
        }
        if (cause.kind === 'aborted' && !cause.dispatched) throw new CancelledFailure('The attempt was cancelled before its request was sent.');
        error = cause.message;
        errorClass = ERROR_CLASS_OF[cause.kind];
      }

      // The outcome is real from here on: keep it until PostgreSQL takes it, whatever else happens.
      const result = { ref, attempt: start.attempt, startedAt: start.startedAt, status, error, errorClass, excerpt, retryAfterSeconds: retryAfter };
      const recorded = await this.untilRecorded(() => this.outcomes.submit(result));
      if (recorded.kind === 'superseded') {
        this.deps.logger.warn({ deliveryId: ref.deliveryId, attempt: start.attempt }, 'delivery attempt outcome superseded by another executor');
        return recorded;
      }
      if (recorded.kind === 'delivered') {
        this.deps.onEvent?.('attempt_delivered');
        return { kind: 'delivered', attempt: start.attempt, status: status ?? 200 };
      }
      this.deps.onEvent?.('attempt_failed');
      // The last attempt's outcome dead-lettered the delivery; the dead-letter step after it finds it done.
      if (recorded.exhausted) this.deps.onEvent?.('dead_lettered');
      this.deps.logger.info({ deliveryId: ref.deliveryId, attempt: start.attempt, error }, 'delivery attempt failed');
      if (liveness.signal.aborted) throw new CancelledFailure('The attempt was cancelled after its request was sent.');
      return { kind: 'failed', sent: recorded.sent, exhausted: recorded.exhausted, error: error ?? 'failed' };
    }
  }

  /**
   * The secrets that sign an attempt made at `at`: the previous one only while its overlap
   * runs, decided by the time of signing, so an overlap ends with nothing to run.
   */
  private signingOf(start: Extract<AttemptStart, { kind: 'send' }>, at: number): DeliverySigning {
    const { secrets } = this.deps;
    const previous = start.previousSecret && overlapRunning(start.previousSecret.endsAtMs, at) ? start.previousSecret : null;
    return {
      current: { secret: secrets.open({ keyId: start.secretKeyId, ciphertext: start.secretCiphertext }, start.endpointId), scheme: start.signatureScheme },
      previous: previous && { secret: secrets.open(previous, start.endpointId), scheme: previous.scheme },
    };
  }

  /**
   * Runs a bookkeeping step, waiting out PostgreSQL being unreachable (any other error is a
   * bug and is thrown). Without a signal it keeps trying for as long as the process lives.
   */
  private async untilRecorded<T>(step: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    for (let failures = 0; ; failures++) {
      try {
        return await step();
      } catch (error) {
        if (!isDatabaseUnavailable(error)) throw error;
        if (failures === 0) this.deps.logger.warn({ err: error }, 'PostgreSQL unreachable during delivery bookkeeping; retrying');
        await this.pause(failures, signal);
      }
    }
  }

  private async pause(failures: number, signal?: AbortSignal): Promise<void> {
    const ms = BOOKKEEPING_BACKOFF_MS[Math.min(failures, BOOKKEEPING_BACKOFF_MS.length - 1)];
    try {
      await sleep(ms, undefined, signal ? { signal } : undefined);
    } catch {
      throw new CancelledFailure('The attempt was cancelled while PostgreSQL was unreachable.');
    }
  }
}

/**
 * The Temporal activities: thin adapters over DeliveryAttempts. An activity execution fails
 * (and so uses one of the retry policy's attempts) only after a counted attempt failed; the
 * failure carries how many were sent, so the workflow can tell if executions that died
 * without sending left attempts unused.
 */
export function createActivities(deps: ActivityDeps): DeliveryActivities {
  const attempts = new DeliveryAttempts(deps);
  return {
    async attemptDelivery(ref: DeliveryRef): Promise<AttemptOutcome> {
      const context = Context.current();
      const result = await attempts.run(ref, { heartbeat: () => context.heartbeat(), signal: context.cancellationSignal });
      if (FREES_A_TURN.has(result.kind)) void wakeNextInLine(deps, ref, () => context.client);
      return activityOutcome(result);
    },
    async deadLetter(ref: DeliveryRef): Promise<void> {
      // The 8th failure's outcome dead-lettered the row already; this activity can come late
      // (a busy worker), after a customer resent the delivery: that series is not this one's.
      const context = Context.current();
      await attempts.deadLetter(ref, context.cancellationSignal, context.info.workflowExecution?.workflowId);
    },
  };
}

/** Results of an attempt that held one of its endpoint's turns and gave it back. */
const FREES_A_TURN: ReadonlySet<AttemptResult['kind']> = new Set(['delivered', 'failed', 'abandoned']);

/**
 * Wakes the deliveries next in line for the endpoint's freed turns (records nextInLine), so
 * they ask again now instead of at the end of their wait. Not awaited by the attempt: a
 * wake lost here (the worker stopping, Temporal or PostgreSQL unreachable) costs the
 * waiting delivery only its fallback wait (turnWait).
 */
async function wakeNextInLine(deps: ActivityDeps, ref: DeliveryRef, clientOf: () => Client): Promise<void> {
  try {
    // The worker's own client; an activity environment made without one (a test's) wakes no one.
    const client = clientOf();
    const next = await deps.records.nextInLine(deps.orm.em.fork(), ref);
    await Promise.all(next.map((workflowId) => client.workflow.getHandle(workflowId).signal(RELEASE_SIGNAL).catch(() => undefined)));
  } catch (error) {
    deps.logger.debug({ err: error, endpointId: ref.endpointId }, 'next in line not woken; its wait will ask again');
  }
}

function activityOutcome(result: AttemptResult): AttemptOutcome {
  switch (result.kind) {
    case 'delivered':
      return { kind: 'delivered', attempt: result.attempt, status: result.status };
    case 'held':
      return { kind: 'held', sent: result.sent };
    case 'turn':
      return { kind: 'turn', sent: result.sent, waitMs: result.waitMs };
    case 'gone':
      throw ApplicationFailure.nonRetryable(result.reason, FAILURE_TYPES.endpointGone);
    case 'exhausted':
      throw ApplicationFailure.create({ message: `All ${result.sent} attempts are used.`, type: FAILURE_TYPES.attemptsExhausted, nonRetryable: true, details: [{ sent: result.sent }] });
    case 'failed':
      throw ApplicationFailure.create({
        message: result.error,
        type: result.exhausted ? FAILURE_TYPES.attemptsExhausted : FAILURE_TYPES.attemptFailed,
        nonRetryable: result.exhausted,
        details: [{ sent: result.sent }],
      });
    case 'superseded':
      throw ApplicationFailure.retryable('Another execution of this delivery recorded its attempt.', FAILURE_TYPES.attemptFailed);
    case 'abandoned':
      throw ApplicationFailure.nonRetryable(result.reason, FAILURE_TYPES.abandoned);
  }
}

/**
 * How an attempt's failure is handled, decided here once for both engines:
 * - receiver: the receiver's side failed (non-2xx, network, TLS, timeout): a counted
 *   attempt, retried 30 s later up to 8 (handled inside the attempt, never thrown here);
 * - transient: ours, and passing (PostgreSQL unreachable) or a stop we were asked for
 *   (cancellation): no attempt is used; the engine takes the delivery up again (Temporal's
 *   next execution, the lease lapsing) and it goes on when PostgreSQL answers;
 * - permanent: ours, and no retry can fix it (a signing secret no configured key opens, a
 *   defect in the send path): the delivery ends dead-lettered with the reason.
 */
export function failureClass(error: unknown): 'transient' | 'permanent' {
  if (isDatabaseUnavailable(error)) return 'transient';
  if (error instanceof CancelledFailure || (error instanceof Error && error.name === 'AbortError')) return 'transient';
  return 'permanent';
}

function describeFailure(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.length > 200 ? `${message.slice(0, 200)}…` : message;
}

/** The outbound client and secrets as configured for this deployment: the API's embedded engine and the Temporal worker use the same. */
export function activityDepsFromConfig(
  config: Pick<Config, 'secretKeys' | 'currentSecretKeyId' | 'delivery'>,
  deps: Pick<ActivityDeps, 'orm' | 'records' | 'logger' | 'now' | 'onEvent'>,
): ActivityDeps {
  return {
    ...deps,
    secrets: new SecretBox(config.secretKeys, config.currentSecretKeyId),
    outbound: tracedOutbound(createOutboundClient({
      allowCidrs: config.delivery.allowCidrs,
      extraCa: config.delivery.extraCaPem ?? undefined,
      timeoutMs: config.delivery.attemptTimeoutMs,
      maxResponseBytes: config.delivery.maxResponseBytes,
      connectionsPerEndpoint: config.delivery.connectionsPerEndpoint,
      connectionMaxAgeMs: config.delivery.connectionMaxAgeMs,
    })),
  };
}
