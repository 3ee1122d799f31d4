import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import {
  deliveryHeaders,
  overlapRunning,
  signatureFor,
  signedHeaders,
  verifyWebhook,
  WebhookVerificationError,
  type WebhookVerificationCode,
} from '../../src/signatures';

const SECRET = 'whsec_7Rk2bQe9mYv4Lp0sXc3nHa8u';
const BODY = JSON.stringify({ id: 'evt_01', type: 'webhook.test', data: { note: 'café ✓' } });
const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);
const NOW_SECONDS = NOW / 1000;

function independentSignature(secret: string, timestamp: number, body: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

function codeOf(fn: () => unknown): WebhookVerificationCode | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(WebhookVerificationError);
    return (err as WebhookVerificationError).code;
  }
  return undefined;
}

describe('signing', () => {
  it('signs "<timestamp>.<raw body>" with HMAC-SHA256 keyed by the whole whsec_ secret, in hex', () => {
    expect(signatureFor(SECRET, NOW_SECONDS, BODY)).toBe(independentSignature(SECRET, NOW_SECONDS, BODY));
    expect(signatureFor(SECRET, NOW_SECONDS, BODY)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('keys with the prefix included, so the secret without whsec_ gives another signature', () => {
    expect(signatureFor(SECRET, NOW_SECONDS, BODY)).not.toBe(independentSignature(SECRET.slice('whsec_'.length), NOW_SECONDS, BODY));
  });

  it('produces JSON content type, the Unix-seconds timestamp and the signature headers', () => {
    const headers = signedHeaders(SECRET, BODY, NOW + 999);
    expect(headers).toEqual({
      'content-type': 'application/json',
      'x-service-timestamp': String(NOW_SECONDS),
      'x-service-signature': independentSignature(SECRET, NOW_SECONDS, BODY),
    });
  });
});

describe('verifyWebhook', () => {
  const fresh = () => signedHeaders(SECRET, BODY, NOW);

  it('accepts a freshly signed request and returns its timestamp', () => {
    expect(verifyWebhook(SECRET, fresh(), BODY, { now: NOW })).toEqual({ timestamp: NOW_SECONDS });
  });

  it('accepts the body as a Buffer of the exact bytes received', () => {
    expect(verifyWebhook(SECRET, fresh(), Buffer.from(BODY, 'utf8'), { now: NOW })).toEqual({ timestamp: NOW_SECONDS });
  });

  it('reads header names case-insensitively, from a plain object or a fetch Headers', () => {
    const h = fresh();
    const shouty = { 'X-Service-Timestamp': h['x-service-timestamp'], 'X-SERVICE-SIGNATURE': h['x-service-signature'] };
    expect(verifyWebhook(SECRET, shouty, BODY, { now: NOW }).timestamp).toBe(NOW_SECONDS);
    expect(verifyWebhook(SECRET, new Headers(shouty), BODY, { now: NOW }).timestamp).toBe(NOW_SECONDS);
  });

  it('accepts a timestamp just inside the five-minute tolerance in either direction', () => {
    expect(codeOf(() => verifyWebhook(SECRET, signedHeaders(SECRET, BODY, NOW - 300_000), BODY, { now: NOW }))).toBeUndefined();
    expect(codeOf(() => verifyWebhook(SECRET, signedHeaders(SECRET, BODY, NOW + 300_000), BODY, { now: NOW }))).toBeUndefined();
  });

  it('rejects a body with one flipped byte', () => {
    const tampered = Buffer.from(BODY, 'utf8');
    tampered[10] = tampered[10]! ^ 0x01;
    expect(codeOf(() => verifyWebhook(SECRET, fresh(), tampered, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
  });

  it('rejects a signature made with another secret', () => {
    const other = signedHeaders('whsec_someoneElse', BODY, NOW);
    expect(codeOf(() => verifyWebhook(SECRET, other, BODY, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
  });

  it('rejects a validly signed timestamp six minutes old', () => {
    const stale = signedHeaders(SECRET, BODY, NOW - 6 * 60_000);
    expect(codeOf(() => verifyWebhook(SECRET, stale, BODY, { now: NOW }))).toBe('TIMESTAMP_OUT_OF_TOLERANCE');
  });

  it('rejects a validly signed timestamp six minutes in the future', () => {
    const future = signedHeaders(SECRET, BODY, NOW + 6 * 60_000);
    expect(codeOf(() => verifyWebhook(SECRET, future, BODY, { now: NOW }))).toBe('TIMESTAMP_OUT_OF_TOLERANCE');
  });

  it('honours a custom tolerance', () => {
    const stale = signedHeaders(SECRET, BODY, NOW - 6 * 60_000);
    expect(verifyWebhook(SECRET, stale, BODY, { now: NOW, toleranceSeconds: 600 }).timestamp).toBe(NOW_SECONDS - 360);
  });

  it('rejects a request without a signature header', () => {
    const { 'x-service-signature': _dropped, ...headers } = fresh();
    expect(codeOf(() => verifyWebhook(SECRET, headers, BODY, { now: NOW }))).toBe('MISSING_SIGNATURE');
  });

  it('rejects a request without a timestamp header', () => {
    const { 'x-service-timestamp': _dropped, ...headers } = fresh();
    expect(codeOf(() => verifyWebhook(SECRET, headers, BODY, { now: NOW }))).toBe('MISSING_TIMESTAMP');
  });

  it.each(['soon', '1.7e9', '-1700000000', '0x6553f100', ' ', '17000000001234567890'])('rejects the malformed (non-numeric or absurd) timestamp %j', (ts) => {
    const headers = { ...fresh(), 'x-service-timestamp': ts };
    expect(codeOf(() => verifyWebhook(SECRET, headers, BODY, { now: NOW }))).toBe('INVALID_TIMESTAMP');
  });

  it('rejects a signature of the wrong length without throwing anything else', () => {
    const h = fresh();
    const short = { ...h, 'x-service-signature': h['x-service-signature']!.slice(0, 63) };
    const long = { ...h, 'x-service-signature': `${h['x-service-signature']}0` };
    expect(codeOf(() => verifyWebhook(SECRET, short, BODY, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
    expect(codeOf(() => verifyWebhook(SECRET, long, BODY, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
  });

  it('rejects a signature that was computed over a different timestamp', () => {
    const h = fresh();
    const moved = { ...h, 'x-service-timestamp': String(NOW_SECONDS + 1) };
    expect(codeOf(() => verifyWebhook(SECRET, moved, BODY, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
  });
});

describe('signing in a scheme, and during an overlap', () => {
  const OLD = SECRET;
  const standardSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
  const DELIVERY_ID = '0b6f3f7e-52a4-4a86-9d6c-5f1f0c3b2a11';
  const standardKeyed = (secret: string, ts: number) =>
    `v1,${createHmac('sha256', Buffer.from(secret.slice('whsec_'.length), 'base64')).update(`${DELIVERY_ID}.${ts}.${BODY}`).digest('base64')}`;

  it('legacy alone is exactly what signedHeaders always sent', () => {
    expect(deliveryHeaders({ current: { secret: OLD, scheme: 'legacy' }, previous: null }, DELIVERY_ID, BODY, NOW)).toEqual(signedHeaders(OLD, BODY, NOW));
  });

  it('standard: webhook-id, webhook-timestamp and one v1 entry keyed with the decoded bytes', () => {
    const secret = standardSecret();
    const headers = deliveryHeaders({ current: { secret, scheme: 'standard' }, previous: null }, DELIVERY_ID, BODY, NOW + 999);
    expect(headers).toEqual({
      'content-type': 'application/json',
      'webhook-id': DELIVERY_ID,
      'webhook-timestamp': String(NOW_SECONDS),
      'webhook-signature': standardKeyed(secret, NOW_SECONDS),
    });
  });

  it('keeps the old secret in x-service-signature during an overlap and puts the new one in x-service-signature-next, which verifyWebhook reads', () => {
    const next = standardSecret();
    const headers = deliveryHeaders({ current: { secret: next, scheme: 'both' }, previous: { secret: OLD, scheme: 'legacy' } }, DELIVERY_ID, BODY, NOW);
    expect(headers['x-service-signature']).toBe(independentSignature(OLD, NOW_SECONDS, BODY));
    expect(headers['x-service-signature-next']).toBe(independentSignature(next, NOW_SECONDS, BODY));
    // The old secret was legacy only: webhook-signature lists only the new one.
    expect(headers['webhook-signature']).toBe(standardKeyed(next, NOW_SECONDS));
    expect(verifyWebhook(OLD, headers, BODY, { now: NOW }).timestamp).toBe(NOW_SECONDS);
    expect(verifyWebhook(next, headers, BODY, { now: NOW }).timestamp).toBe(NOW_SECONDS);
    expect(codeOf(() => verifyWebhook('whsec_neither', headers, BODY, { now: NOW }))).toBe('SIGNATURE_MISMATCH');
  });

  it('lists both secrets in webhook-signature when both sign standard, and the reference library takes either', () => {
    const [old, next] = [standardSecret(), standardSecret()];
    const headers = deliveryHeaders({ current: { secret: next, scheme: 'standard' }, previous: { secret: old, scheme: 'standard' } }, DELIVERY_ID, BODY);
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(headers['x-service-signature']).toBeUndefined();
    for (const secret of [old, next]) expect(new Webhook(secret).verify(BODY, headers)).toEqual(JSON.parse(BODY));
    expect(() => new Webhook(standardSecret()).verify(BODY, headers)).toThrow('No matching signature found');
  });

  it('ends an overlap at its end instant, not a millisecond later', () => {
    expect(overlapRunning(NOW, NOW - 1)).toBe(true);
    expect(overlapRunning(NOW, NOW)).toBe(false);
    expect(overlapRunning(null, NOW)).toBe(false);
  });
});
