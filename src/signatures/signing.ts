/**
 * Signs webhook deliveries (seed-spec section 6, "Delivery format"): hex HMAC-SHA256
 * over `<unix seconds>.<raw body>`, keyed with the endpoint's whole secret string,
 * `whsec_` prefix included, as UTF-8 bytes.
 */
import { createHmac } from 'node:crypto';

export const SIGNATURE_HEADER = 'x-service-signature';
export const TIMESTAMP_HEADER = 'x-service-timestamp';

/** `rawBody` may be a Buffer so receivers can verify the exact bytes they were sent. */
export function signatureFor(secret: string, timestamp: number, rawBody: string | Uint8Array): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${timestamp}.`, 'utf8').update(rawBody).digest('hex');
}

/** The headers of one delivery attempt; a retry signs again with a fresh timestamp. */
export function signedHeaders(secret: string, rawBody: string, now: number = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  return {
    'content-type': 'application/json',
    [TIMESTAMP_HEADER]: String(timestamp),
    [SIGNATURE_HEADER]: signatureFor(secret, timestamp, rawBody),
  };
}
