import {
  ActivityFailure,
  ApplicationFailure,
  continueAsNew,
  isCancellation,
  proxyActivities,
  sleep,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { AttemptOutcome, DeliveryActivities, DeliveryRef } from '../src/delivery/contract';
import { ACTIVITY_START_TO_CLOSE_MS, FAILURE_TYPES, MAX_ATTEMPTS, RETRY_INTERVAL_MS } from './policy';

/**
 * The contract's fixed 30 s between attempts, at most 8 attempts. maximumInterval equals
 * initialInterval so the interval can never grow, even if the coefficient is changed.
 */
export const ATTEMPT_ACTIVITY_OPTIONS = {
  startToCloseTimeout: ACTIVITY_START_TO_CLOSE_MS,
  retry: {
    initialInterval: RETRY_INTERVAL_MS,
    backoffCoefficient: 1,
    maximumInterval: RETRY_INTERVAL_MS,
    maximumAttempts: MAX_ATTEMPTS,
    nonRetryableErrorTypes: [FAILURE_TYPES.endpointGone, FAILURE_TYPES.attemptsExhausted],
  },
} satisfies ActivityOptions;

/** Dead-lettering only writes to our database, so it retries until the database is back. */
export const DEAD_LETTER_ACTIVITY_OPTIONS = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
} satisfies ActivityOptions;

const { attemptDelivery } = proxyActivities<DeliveryActivities>(ATTEMPT_ACTIVITY_OPTIONS);
const { deadLetter } = proxyActivities<DeliveryActivities>(DEAD_LETTER_ACTIVITY_OPTIONS);

export type DeliveryResult = { status: 'delivered' | 'failed' | 'dead_lettered'; attempts?: number; reason?: string };

/** Delivers one event to one endpoint; the delivery row stays the source of truth for its status. */
export async function deliverWebhook(ref: DeliveryRef): Promise<DeliveryResult> {
  for (;;) {
    let outcome: AttemptOutcome;
    try {
      outcome = await attemptDelivery(ref);
    } catch (err) {
      return settleFailure(ref, err);
    }
    if (outcome.kind === 'delivered') return { status: 'delivered', attempts: outcome.attempt };
    // A kill switch held the delivery without using an attempt: wait one interval and ask again.
    await sleep(RETRY_INTERVAL_MS);
    // A long kill switch would otherwise grow the history towards Temporal's event limit.
    if (workflowInfo().continueAsNewSuggested) await continueAsNew<typeof deliverWebhook>(ref);
  }
}

async function settleFailure(ref: DeliveryRef, err: unknown): Promise<DeliveryResult> {
  if (isCancellation(err)) throw err;
  if (
    err instanceof ActivityFailure &&
    err.cause instanceof ApplicationFailure &&
    err.cause.type === FAILURE_TYPES.endpointGone
  ) {
    // The activity already marked the row failed with this reason; a dead letter would be noise.
    return { status: 'failed', reason: err.cause.message };
  }
  await deadLetter(ref);
  return { status: 'dead_lettered' };
}
