import { createHash, randomBytes } from 'node:crypto';
import { type EntityManager, ApiKeySchema, type Role } from '../db';
import type { CustomerPrincipal } from './principal';
import type { PrincipalCache } from './principal-cache';

/** Keys look like `pk_live_<43 base64url chars>`: 256 random bits, recognisable in leaks. */
const KEY_PREFIX = 'pk_live_';

export function hashKey(key: string): string {
  // The key has 256 bits of entropy, so a fast hash is enough: there is nothing to brute-force.
  return createHash('sha256').update(key).digest('hex');
}

export interface IssuedKey {
  id: string;
  /** The key itself, shown this once. */
  key: string;
  prefix: string;
  scopes: string[];
}

export async function issueApiKey(
  em: EntityManager,
  input: { organizationId: string; userId: string; name: string; scopes: string[] },
): Promise<IssuedKey> {
  const key = KEY_PREFIX + randomBytes(32).toString('base64url');
  const prefix = key.slice(0, KEY_PREFIX.length + 6);
  const row = em.create(ApiKeySchema, {
    organizationId: input.organizationId,
    userId: input.userId,
    name: input.name,
    prefix,
    keyHash: hashKey(key),
    scopes: input.scopes,
  });
  await em.flush();
  return { id: row.id, key, prefix, scopes: input.scopes };
}

export async function revokeApiKey(em: EntityManager, keyId: string): Promise<boolean> {
  const updated = await em.nativeUpdate(ApiKeySchema, { id: keyId, revokedAt: null }, { revokedAt: new Date() });
  return updated > 0;
}

export type Authentication =
  | { ok: true; principal: CustomerPrincipal }
  | { ok: false; code: 'API_KEY_INVALID' | 'API_KEY_REVOKED' };

/** Last use is recorded at most once a minute per key, so a busy key does not turn every read into a write. */
const LAST_USE_EVERY_MS = 60_000;

/**
 * Looks a presented key up by its hash, with its owner's role, in one query, or takes it
 * from `cache` (see PrincipalCache for when that is safe).
 */
export async function authenticate(em: EntityManager, presented: string, cache?: PrincipalCache): Promise<Authentication> {
  if (!presented.startsWith(KEY_PREFIX) || presented.length > 128) return { ok: false, code: 'API_KEY_INVALID' };
  const keyHash = hashKey(presented);
  const now = Date.now();
  const cached = cache?.get(keyHash);
  if (cached) {
    if (now - cached.lastUsedAt > LAST_USE_EVERY_MS) {
      cached.lastUsedAt = now;
      await recordUse(em, cached.principal.apiKeyId, now);
    }
    return { ok: true, principal: cached.principal };
  }
  const version = cache?.version ?? 0;
  const [row] = await em.execute<KeyRow[]>(
    `select k.id, k.organization_id, k.user_id, k.scopes, k.revoked_at, k.last_used_at, u.role
       from api_keys k join users u on u.id = k.user_id and u.organization_id = k.organization_id
      where k.key_hash = ?`,
    [keyHash],
  );
  if (!row) return { ok: false, code: 'API_KEY_INVALID' };
  if (row.revoked_at) return { ok: false, code: 'API_KEY_REVOKED' };
  let lastUsedAt = row.last_used_at ? new Date(row.last_used_at).getTime() : 0;
  if (now - lastUsedAt > LAST_USE_EVERY_MS) {
    await recordUse(em, row.id, now);
    lastUsedAt = now;
  }
  const principal: CustomerPrincipal = {
    kind: 'customer',
    organizationId: row.organization_id,
    userId: row.user_id,
    role: row.role,
    apiKeyId: row.id,
    scopes: row.scopes,
  };
  cache?.set(keyHash, principal, lastUsedAt, version);
  return { ok: true, principal };
}

async function recordUse(em: EntityManager, keyId: string, now: number): Promise<void> {
  await em.execute('update api_keys set last_used_at = ? where id = ?', [new Date(now), keyId], 'run');
}

interface KeyRow {
  id: string;
  organization_id: string;
  user_id: string;
  scopes: string[];
  revoked_at: Date | null;
  last_used_at: Date | null;
  role: Role;
}
