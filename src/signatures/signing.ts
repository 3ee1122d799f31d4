/**
 * Signs webhook deliveries, in the scheme each endpoint chose (README "Signing schemes and
 * rotation"):
 *
 * - legacy (seed-spec section 6, "Delivery format"): hex HMAC-SHA256 over
 *   `<unix seconds>.<raw body>`, keyed with the endpoint's whole secret string, `whsec_`
 *   prefix included, as UTF-8 bytes;
 * - standard (Standard Webhooks, standardwebhooks.com): base64 HMAC-SHA256 over
 *   `<webhook-id>.<unix seconds>.<raw body>`, keyed with the bytes the secret's base64
 *   (after `whsec_`) decodes to;
 * - both: the two sets of headers on every delivery.
 */
import { createHmac } from 'node:crypto';
import type { SignatureScheme } from '../db';

export const SIGNATURE_HEADER = 'x-service-signature';
export const TIMESTAMP_HEADER = 'x-service-timestamp';
/** During a rotation's overlap: the legacy signature with the new secret, while x-service-signature keeps the old one's. */
export const NEXT_SIGNATURE_HEADER = 'x-service-signature-next';
export const STANDARD_ID_HEADER = 'webhook-id';
export const STANDARD_TIMESTAMP_HEADER = 'webhook-timestamp';
export const STANDARD_SIGNATURE_HEADER = 'webhook-signature';

const SECRET_PREFIX = 'whsec_';

/** A signing secret and the scheme it signs in. */
export interface SigningKey {
  secret: string;
  scheme: SignatureScheme;
}

/** What signs one attempt: the endpoint's secret, and while an overlap runs the one before it. */
export interface DeliverySigning {
  current: SigningKey;
  previous: SigningKey | null;
}

/** `rawBody` may be a Buffer so receivers can verify the exact bytes they were sent. */
export function signatureFor(secret: string, timestamp: number, rawBody: string | Uint8Array): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${timestamp}.`, 'utf8').update(rawBody).digest('hex');
}

/** One `v1,<base64>` entry of webhook-signature. */
export function standardSignatureFor(secret: string, messageId: string, timestamp: number, rawBody: string | Uint8Array): string {
  const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');
  return `v1,${createHmac('sha256', key).update(`${messageId}.${timestamp}.`, 'utf8').update(rawBody).digest('base64')}`;
}

/** Whether a rotation's previous secret still signs at `now`: until the overlap's end, excluded. */
export function overlapRunning(endsAtMs: number | null, now: number): boolean {
  return endsAtMs !== null && now < endsAtMs;
}

const sendsLegacy = (scheme: SignatureScheme) => scheme !== 'standard';
const sendsStandard = (scheme: SignatureScheme) => scheme !== 'legacy';

/**
 * The headers of one delivery attempt; a retry signs again with a fresh timestamp.
 * `messageId` is webhook-id, the same on every attempt of a delivery.
 *
 * During an overlap a receiver that changed nothing finds what it checked before: the old
 * secret's legacy signature in x-service-signature, its standard signature among
 * webhook-signature's entries. The new secret adds x-service-signature-next (when both
 * secrets sign legacy) and its own webhook-signature entry.
 */
export function deliveryHeaders(signing: DeliverySigning, messageId: string, rawBody: string, now: number = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  const keys = signing.previous ? [signing.previous, signing.current] : [signing.current];
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const [legacy, nextLegacy] = keys.filter((k) => sendsLegacy(k.scheme));
  if (legacy) {
    headers[TIMESTAMP_HEADER] = String(timestamp);
    headers[SIGNATURE_HEADER] = signatureFor(legacy.secret, timestamp, rawBody);
    if (nextLegacy) headers[NEXT_SIGNATURE_HEADER] = signatureFor(nextLegacy.secret, timestamp, rawBody);
  }
  const standard = keys.filter((k) => sendsStandard(k.scheme)).reverse();
  if (standard.length > 0) {
    headers[STANDARD_ID_HEADER] = messageId;
    headers[STANDARD_TIMESTAMP_HEADER] = String(timestamp);
    headers[STANDARD_SIGNATURE_HEADER] = standard.map((k) => standardSignatureFor(k.secret, messageId, timestamp, rawBody)).join(' ');
  }
  return headers;
}

/** The headers of a legacy delivery signed with one secret (no overlap). */
export function signedHeaders(secret: string, rawBody: string, now: number = Date.now()): Record<string, string> {
  return deliveryHeaders({ current: { secret, scheme: 'legacy' }, previous: null }, '', rawBody, now);
}
