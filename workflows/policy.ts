/**
 * The delivery retry policy from the contract: a fixed 30 seconds between attempts,
 * at most 8 attempts, then the dead-letter activity. Both engines read these
 * constants; only the embedded engine's test configuration may shorten the interval.
 */
export const RETRY_INTERVAL_MS = 30_000;
export const MAX_ATTEMPTS = 8;

export const DELIVERY_RETRY_POLICY = {
  initialInterval: RETRY_INTERVAL_MS,
  backoffCoefficient: 1,
  maximumInterval: RETRY_INTERVAL_MS,
  maximumAttempts: MAX_ATTEMPTS,
} as const;

/** How long one attempt may take before it counts as failed (timeout of the outbound POST plus margin). */
export const ATTEMPT_TIMEOUT_MS = 15_000;
export const ACTIVITY_START_TO_CLOSE_MS = 20_000;

/** Failure types the attempt activity throws; the two non-retryable ones end the retries. */
export const FAILURE_TYPES = {
  attemptFailed: 'DeliveryAttemptFailed',
  endpointGone: 'EndpointGone',
  attemptsExhausted: 'AttemptsExhausted',
} as const;
