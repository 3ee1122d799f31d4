/**
 * The delivery policy, in one place for both engines, the activities and configuration.
 *
 * From the contract: a fixed 30 seconds between attempts, at most 8 attempts, then the
 * dead-letter activity. Only the embedded engine's test configuration may shorten the
 * interval.
 *
 * The timeouts derive from each other so that no configuration can make one outlive
 * another: configuration may set the outbound deadline up to ATTEMPT_TIMEOUT_LIMIT_MS
 * (refused at start beyond it); the activity's start-to-close leaves room for that
 * deadline plus the time an attempt may spend waiting for PostgreSQL to record what
 * happened; liveness is proved by heartbeats (Temporal) or lease renewals (embedded
 * engine) every HEARTBEAT_INTERVAL_MS, and a worker or instance silent for
 * HEARTBEAT_TIMEOUT_MS is taken for dead.
 */
export const RETRY_INTERVAL_MS = 30_000;
export const MAX_ATTEMPTS = 8;

/** Default deadline of one outbound request: DNS, connect, TLS, request and response. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 10_000;
/** The largest outbound deadline configuration may set. */
export const ATTEMPT_TIMEOUT_LIMIT_MS = 30_000;
/**
 * Attempts one endpoint may have in flight at once, by default (DELIVERY_ENDPOINT_CONCURRENCY).
 * Its other due deliveries wait their turn without using an attempt, so a slow endpoint
 * holds at most this many of an engine's slots. At most the outbound connections kept per
 * receiver (DELIVERY_CONNECTIONS_PER_ENDPOINT, 16), so an attempt never queues for one of ours.
 */
export const DEFAULT_ENDPOINT_CONCURRENCY = 4;
/**
 * A delivery waiting for its endpoint's turn on Temporal is woken when a turn frees: the
 * attempt that freed it signals the endpoint's next in line (records/turns.ts). Its own wait
 * is only the fallback for a wake that was lost or raced, set from its place in the line
 * (the endpoint's open deliveries recorded before it, divided by its turns: its rounds):
 * TURN_WAIT_MIN_MS per round while it is within TURN_FRONT_ROUNDS of the front,
 * TURN_WAIT_ROUND_MS per round further back, at most TURN_WAIT_MAX_MS. A backlog of
 * thousands asks a few times a minute per endpoint, not every second, and its workflow
 * tasks leave the server and the workers to everyone else's deliveries.
 */
export const TURN_WAIT_MIN_MS = 1_000;
export const TURN_WAIT_ROUND_MS = 10_000;
export const TURN_WAIT_MAX_MS = 300_000;
/** Rounds of turns ahead within which a waiting delivery asks again by itself after TURN_WAIT_MIN_MS per round. */
export const TURN_FRONT_ROUNDS = 2;
/** The place in line is counted up to this many ahead: beyond it the wait is the longest anyway. */
export const TURN_PLACE_LIMIT = 256;
/** How long an attempt keeps retrying its bookkeeping while PostgreSQL is unreachable. */
export const BOOKKEEPING_PATIENCE_MS = 5 * 60_000;
/** Upper bound of one attempt activity: its request plus its bookkeeping. */
export const ACTIVITY_START_TO_CLOSE_MS = ATTEMPT_TIMEOUT_LIMIT_MS + BOOKKEEPING_PATIENCE_MS;
/** Heartbeats (Temporal) and lease renewals (embedded engine) come this often while an attempt runs. */
export const HEARTBEAT_INTERVAL_MS = 3_000;
/** Silence after which an attempt's worker counts as dead: Temporal's heartbeat timeout, the embedded lease. */
export const HEARTBEAT_TIMEOUT_MS = 5 * HEARTBEAT_INTERVAL_MS;

/**
 * An attempt still unfinished this long after it began is no longer counted in flight: its
 * executor died (its deadline and a heartbeat timeout have passed), and the takeover that
 * closes its row must not wait for a turn the dead attempt holds.
 */
export const IN_FLIGHT_BOUND_MS = ATTEMPT_TIMEOUT_LIMIT_MS + HEARTBEAT_TIMEOUT_MS;

/**
 * The retry policy of the attempt activity. maximumInterval equals initialInterval so the
 * interval can never grow, even if the coefficient is changed. maximumAttempts is the
 * number of sends a delivery has left (MAX_ATTEMPTS for a new one): see workflows/delivery.ts.
 */
export const DELIVERY_RETRY_POLICY = {
  initialInterval: RETRY_INTERVAL_MS,
  backoffCoefficient: 1,
  maximumInterval: RETRY_INTERVAL_MS,
  maximumAttempts: MAX_ATTEMPTS,
} as const;

/**
 * Failure types the attempt activity throws; the non-retryable ones end the retries.
 * `abandoned`: a failure of ours that no retry can fix (a signing secret no configured key
 * opens, a defect in the send path); the activity has already dead-lettered the row with
 * the reason, and no attempt was used.
 */
export const FAILURE_TYPES = {
  attemptFailed: 'DeliveryAttemptFailed',
  endpointGone: 'EndpointGone',
  attemptsExhausted: 'AttemptsExhausted',
  abandoned: 'DeliveryAbandoned',
} as const;

/**
 * Signal that wakes a waiting delivery's workflow to ask again at once: the API sends it when
 * a kill switch goes off or an endpoint is resumed, the worker when a turn of the delivery's
 * endpoint frees.
 */
export const RELEASE_SIGNAL = 'releaseHeldDelivery';

/**
 * Search attributes the delivery workflow keeps current, so an operator can list deliveries
 * by how they ended in the Temporal UI (`DeliveryOutcome = "dead_lettered"`): the outcome
 * (a Keyword) and the attempts sent (an Int). The API sets them at start, only when
 * TEMPORAL_SEARCH_ATTRIBUTES=true; the workflow updates them only when they were set.
 */
export const OUTCOME_ATTRIBUTES = { outcome: 'DeliveryOutcome', attempts: 'DeliveryAttempts' } as const;

/** The values of DeliveryOutcome: `sending` from the start until the workflow learns more. */
export type DeliveryOutcome = 'sending' | 'held' | 'retrying' | 'delivered' | 'dead_lettered' | 'failed';
