/**
 * What a customer's receiver runs on every webhook (seed-spec section 6): recompute
 * the signature over the exact body bytes, compare in constant time, and refuse
 * timestamps outside the tolerance so a captured delivery cannot be replayed later.
 * During a rotation's overlap x-service-signature-next carries the new secret's
 * signature, so a receiver may switch to the new secret before the overlap ends.
 *
 *   verifyWebhook(process.env.WEBHOOK_SECRET!, req.headers, rawBodyBuffer);
 *
 * Pass the body exactly as received (before any JSON parsing): re-serialised JSON
 * rarely has the same bytes.
 */
import { timingSafeEqual } from 'node:crypto';
import { NEXT_SIGNATURE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signatureFor } from './signing';

export type WebhookVerificationCode =
  | 'MISSING_SIGNATURE'
  | 'MISSING_TIMESTAMP'
  | 'INVALID_TIMESTAMP'
  | 'TIMESTAMP_OUT_OF_TOLERANCE'
  | 'SIGNATURE_MISMATCH';

export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
  constructor(
    readonly code: WebhookVerificationCode,
    message: string,
  ) {
    super(message);
  }
}

export interface VerifyOptions {
  /** Seconds a timestamp may be in the past or the future. Default 300 (the contract's five minutes). */
  toleranceSeconds?: number;
  /** Current time in milliseconds; for tests. */
  now?: number;
}

type HeaderBag = Record<string, string | string[] | undefined> | Headers;

const DEFAULT_TOLERANCE_SECONDS = 300;

export function verifyWebhook(
  secret: string,
  headers: HeaderBag,
  rawBody: string | Buffer,
  options: VerifyOptions = {},
): { timestamp: number } {
  const signature = header(headers, SIGNATURE_HEADER);
  if (!signature) throw new WebhookVerificationError('MISSING_SIGNATURE', `The ${SIGNATURE_HEADER} header is missing.`);
  const rawTimestamp = header(headers, TIMESTAMP_HEADER);
  if (!rawTimestamp) throw new WebhookVerificationError('MISSING_TIMESTAMP', `The ${TIMESTAMP_HEADER} header is missing.`);

  // Digits only: Number() would also accept "1e9", "0x10" or " 12 ", which the signer never sends.
  if (!/^\d{1,15}$/.test(rawTimestamp)) {
    throw new WebhookVerificationError('INVALID_TIMESTAMP', `The ${TIMESTAMP_HEADER} header is not a Unix time in seconds.`);
  }
  const timestamp = Number(rawTimestamp);
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const nowSeconds = (options.now ?? Date.now()) / 1000;
  if (Math.abs(nowSeconds - timestamp) > tolerance) {
    throw new WebhookVerificationError('TIMESTAMP_OUT_OF_TOLERANCE', `The timestamp is more than ${tolerance} seconds away from now.`);
  }

  const expected = Buffer.from(signatureFor(secret, timestamp, rawBody), 'utf8');
  const candidates = [signature, header(headers, NEXT_SIGNATURE_HEADER)].filter((s): s is string => s !== undefined);
  // Every candidate is compared, so the time taken does not tell which one matched.
  const matches = candidates.map((candidate) => {
    const received = Buffer.from(candidate.trim().toLowerCase(), 'utf8');
    // timingSafeEqual throws on unequal lengths; the length of a hex digest is no secret.
    return received.length === expected.length && timingSafeEqual(received, expected);
  });
  if (!matches.includes(true)) {
    throw new WebhookVerificationError('SIGNATURE_MISMATCH', 'The signature does not match the body and timestamp.');
  }
  return { timestamp };
}

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof Headers !== 'undefined' && headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== name) continue;
    return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}
