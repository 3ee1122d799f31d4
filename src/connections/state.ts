import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The signed state of a connection attempt. It travels through the provider's redirect,
 * so it is authenticated (HMAC-SHA256), carries a 128-bit random nonce, expires after
 * 15 minutes and names the one person and organization allowed to complete it.
 */
export const STATE_TTL_MS = 15 * 60 * 1000;
const VERSION = 'v1';

export interface StatePayload {
  /** Attempt id; the attempt row makes the state single-use. */
  attemptId: string;
  organizationId: string;
  userId: string;
  toolkit: string;
  /** Expiry, Unix milliseconds. */
  expiresAt: number;
  nonce: string;
}

export type StateCheck =
  | { ok: true; payload: StatePayload }
  | { ok: false; code: 'STATE_INVALID' | 'STATE_EXPIRED' | 'STATE_ORGANIZATION_MISMATCH' | 'STATE_USER_MISMATCH' };

export class StateSigner {
  constructor(private readonly key: Buffer) {}

  sign(fields: Omit<StatePayload, 'nonce'>): string {
    const payload: StatePayload = { ...fields, nonce: randomBytes(16).toString('base64url') };
    const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
    return `${VERSION}.${body}.${this.mac(body)}`;
  }

  /** Checks, in order: signature, expiry, organization, person. */
  verify(token: string, caller: { organizationId: string; userId: string }, now: number): StateCheck {
    const [version, body, mac, ...rest] = token.split('.');
    if (version !== VERSION || !body || !mac || rest.length > 0) return { ok: false, code: 'STATE_INVALID' };
    const expected = Buffer.from(this.mac(body));
    const presented = Buffer.from(mac);
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
      return { ok: false, code: 'STATE_INVALID' };
    }
    let payload: StatePayload;
    try {
      payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as StatePayload;
    } catch {
      return { ok: false, code: 'STATE_INVALID' };
    }
    if (typeof payload.expiresAt !== 'number' || typeof payload.attemptId !== 'string') return { ok: false, code: 'STATE_INVALID' };
    if (now >= payload.expiresAt) return { ok: false, code: 'STATE_EXPIRED' };
    if (payload.organizationId !== caller.organizationId) return { ok: false, code: 'STATE_ORGANIZATION_MISMATCH' };
    if (payload.userId !== caller.userId) return { ok: false, code: 'STATE_USER_MISMATCH' };
    return { ok: true, payload };
  }

  private mac(body: string): string {
    return createHmac('sha256', this.key).update(`${VERSION}.${body}`).digest('base64url');
  }
}
