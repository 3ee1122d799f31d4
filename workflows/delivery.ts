import {
  ActivityFailure,
  ApplicationFailure,
  condition,
  continueAsNew,
  defineSignal,
  isCancellation,
  patched,
  proxyActivities,
  setHandler,
  sleep,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { AttemptOutcome, DeliveryActivities, DeliveryRef } from '../src/delivery/contract';
import {
  ACTIVITY_START_TO_CLOSE_MS,
  DELIVERY_RETRY_POLICY,
  FAILURE_TYPES,
  HEARTBEAT_TIMEOUT_MS,
  MAX_ATTEMPTS,
  RELEASE_SIGNAL,
  RETRY_INTERVAL_MS,
} from './policy';
import { OutcomeReport } from './outcome';

/**
 * The attempt activity's options: the contract's fixed 30 s between attempts, at most 8.
 * The activity heartbeats, so a worker that dies is noticed after HEARTBEAT_TIMEOUT_MS
 * rather than after the whole start-to-close timeout.
 */
export const ATTEMPT_ACTIVITY_OPTIONS = {
  startToCloseTimeout: ACTIVITY_START_TO_CLOSE_MS,
  heartbeatTimeout: HEARTBEAT_TIMEOUT_MS,
  retry: {
    ...DELIVERY_RETRY_POLICY,
    nonRetryableErrorTypes: [FAILURE_TYPES.endpointGone, FAILURE_TYPES.attemptsExhausted],
  },
} satisfies ActivityOptions;

/** Dead-lettering only writes to our database, so it retries until the database is back. */
export const DEAD_LETTER_ACTIVITY_OPTIONS = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
} satisfies ActivityOptions;

/** Patches of changes made while deliveries were running (docs/changing-the-workflow.md). */
export const PATCHES = {
  /** A held delivery wakes on the release signal instead of sleeping out its interval. */
  releaseSignal: 'release-signal',
  /** Retries that ran out with attempts unsent (a worker died before sending) are topped up. */
  topUpUnsentAttempts: 'top-up-unsent-attempts',
  /** An endpoint with all its turns in flight: wait briefly and ask again, instead of an interval as if held. */
  endpointTurn: 'endpoint-turn',
  /** DeliveryOutcome and DeliveryAttempts are updated as the workflow learns them (outcome.ts). */
  outcomeInUi: 'outcome-search-attributes',
  /** A delivery waiting for its endpoint's turn wakes on the signal of the attempt that freed one, its wait only a fallback. */
  turnWake: 'turn-wake',
} as const;

/** A wait for an endpoint's turn, jittered (the workflow's seeded Math.random) so a burst's deliveries do not come back together. */
function jittered(ms: number): number {
  return Math.round(ms * (0.5 + Math.random()));
}

export const releaseSignal = defineSignal(RELEASE_SIGNAL);

const { deadLetter } = proxyActivities<DeliveryActivities>(DEAD_LETTER_ACTIVITY_OPTIONS);

/**
 * The attempt activity with a retry budget of the attempts the delivery has left. Its
 * fairness key is the endpoint: with fairness on the task queue (matching.enableFairness),
 * each endpoint's attempts get their share of dispatch, so one endpoint's backlog does not
 * queue another's first attempt behind it.
 */
function attemptsLeft(ref: DeliveryRef, remaining: number, intervalMs: number | undefined) {
  const retry = { ...ATTEMPT_ACTIVITY_OPTIONS.retry, maximumAttempts: Math.max(1, remaining) };
  return proxyActivities<DeliveryActivities>({
    ...ATTEMPT_ACTIVITY_OPTIONS,
    priority: { fairnessKey: ref.endpointId },
    retry: intervalMs === undefined ? retry : { ...retry, initialInterval: intervalMs, maximumInterval: intervalMs },
  }).attemptDelivery;
}

export type DeliveryResult = { status: 'delivered' | 'failed' | 'dead_lettered'; attempts?: number; reason?: string };

/** Carried across continue-as-new: how many attempts the delivery had made. */
export interface DeliveryProgress {
  sent: number;
  /**
   * The interval between attempts when it is not the contract's 30 s: only a test
   * configuration (DELIVERY_TEST_RETRY_INTERVAL_MS, refused outside NODE_ENV=test) sets it,
   * so the engines keep one schedule in suites that would otherwise wait minutes.
   */
  retryIntervalMs?: number;
}

/**
 * Delivers one event to one endpoint; the delivery row stays the source of truth for its status.
 *
 * Temporal owns the schedule: the retry policy runs the attempt activity 30 s apart. Its
 * count and the row's stay equal because the activity fails only after a counted attempt
 * (a send, or a failure on the receiver's side of the network) and reports the row's count;
 * infrastructure failures before a send are waited out inside the activity. The one way an
 * execution can end without a send is a worker that died (heartbeat timeout); when the
 * retries run out with fewer than 8 sent, the workflow schedules the rest, one interval later.
 */
export async function deliverWebhook(ref: DeliveryRef, progress: DeliveryProgress = { sent: 0 }): Promise<DeliveryResult> {
  const interval = progress.retryIntervalMs ?? RETRY_INTERVAL_MS;
  let released = false;
  setHandler(releaseSignal, () => {
    released = true;
  });
  let sent = progress.sent;
  const report = new OutcomeReport(PATCHES.outcomeInUi);
  for (;;) {
    // A release counts from the attempt on: one that arrives while a held attempt's result is
    // on its way must still wake the wait that follows.
    released = false;
    let outcome: AttemptOutcome;
    report.sending(sent);
    try {
      outcome = await attemptsLeft(ref, MAX_ATTEMPTS - sent, progress.retryIntervalMs)(ref);
    } catch (err) {
      if (isCancellation(err)) throw err;
      const failure = err instanceof ActivityFailure ? err.cause : undefined;
      if (failure instanceof ApplicationFailure && failure.type === FAILURE_TYPES.endpointGone) {
        // The activity already marked the row failed with this reason; a dead letter would be noise.
        report.ended('failed', sent, failure.message);
        return { status: 'failed', reason: failure.message };
      }
      if (failure instanceof ApplicationFailure && failure.type === FAILURE_TYPES.abandoned) {
        // A failure of ours no retry can fix: the activity already dead-lettered the row with the reason.
        report.ended('dead_lettered', sent, failure.message);
        return { status: 'dead_lettered', reason: failure.message };
      }
      const exhausted = failure instanceof ApplicationFailure && failure.type === FAILURE_TYPES.attemptsExhausted;
      if (!exhausted && patched(PATCHES.topUpUnsentAttempts)) {
        const reported = sentIn(failure);
        sent = reported ?? sent;
        if (reported === undefined || reported < MAX_ATTEMPTS) {
          report.retrying(sent, Date.now() + interval);
          await sleep(interval);
          continue;
        }
      }
      await deadLetter(ref);
      report.ended('dead_lettered', sentIn(failure) ?? MAX_ATTEMPTS);
      return { status: 'dead_lettered' };
    }
    if (outcome.kind === 'delivered') {
      report.ended('delivered', outcome.attempt);
      return { status: 'delivered', attempts: outcome.attempt };
    }
    // The endpoint's turns were all in flight: nothing was sent or counted; ask again when a
    // turn frees, or after the wait the activity set from the delivery's place in the
    // endpoint's line. No activity slot is held meanwhile.
    if (outcome.kind === 'turn' && patched(PATCHES.endpointTurn)) {
      sent = outcome.sent;
      // Woken early by the signal the attempt that frees a turn sends (released counts from
      // the activity on, so a wake that came while it ran is not lost).
      if (patched(PATCHES.turnWake)) {
        await condition(() => released, jittered(outcome.waitMs));
      } else {
        await sleep(jittered(outcome.waitMs));
      }
      if (workflowInfo().continueAsNewSuggested) await continueAsNew<typeof deliverWebhook>(ref, { ...progress, sent });
      continue;
    }
    // A kill switch held the delivery without using an attempt: wait one interval, or until released.
    sent = outcome.sent ?? sent;
    report.held(sent, Date.now() + interval);
    if (patched(PATCHES.releaseSignal)) {
      await condition(() => released, interval);
    } else {
      await sleep(interval);
    }
    // A long kill switch would otherwise grow the history towards Temporal's event limit.
    if (workflowInfo().continueAsNewSuggested) await continueAsNew<typeof deliverWebhook>(ref, { ...progress, sent });
  }
}

/** The sends an attempt failure reported (details `[{ sent }]`), if it could report them. */
function sentIn(failure: unknown): number | undefined {
  if (!(failure instanceof ApplicationFailure)) return undefined;
  const [details] = failure.details ?? [];
  const sent = (details as { sent?: unknown } | undefined)?.sent;
  return typeof sent === 'number' ? sent : undefined;
}
