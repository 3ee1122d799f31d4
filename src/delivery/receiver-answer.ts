/**
 * What a receiver's answer says beyond delivered or not. The contract's schedule is fixed
 * (30 s between attempts, at most 8), so none of this moves an attempt: a Retry-After is
 * kept with the attempt for the customer to see in the delivery log.
 */

/** Statuses whose Retry-After the delivery log keeps: too many requests, and unavailable. */
const ASKS_TO_WAIT = new Set([429, 503]);
/** The largest wait kept (a week): a receiver's number beyond it says "much later" no less clearly. */
const RETRY_AFTER_LIMIT_S = 7 * 24 * 3600;

/**
 * The wait a 429 or 503 asked for, in seconds: Retry-After as delta-seconds, or an HTTP date
 * counted from `now`; null for any other status, no header, or one that is neither.
 */
export function retryAfterSeconds(status: number, header: string | null, now: number): number | null {
  if (!ASKS_TO_WAIT.has(status) || header === null) return null;
  const value = header.trim();
  if (/^\d+$/.test(value)) return Math.min(Number(value), RETRY_AFTER_LIMIT_S);
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  return Math.min(Math.max(0, Math.ceil((at - now) / 1000)), RETRY_AFTER_LIMIT_S);
}
