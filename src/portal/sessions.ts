import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { PortalAuthentication, PortalPrincipal } from '../auth';
import { isUuid, type EntityManager, type PortalSessionSchema } from '../db';
import { apiError } from '../errors';

type Tables = InferKyselyDB<typeof PortalSessionSchema>;
const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

/** What a session may do besides reading (the `portal_capability` of each RPC's access rule). */
export const PORTAL_CAPABILITIES = ['read', 'secrets', 'manage_endpoints', 'resend'] as const;
export type PortalCapability = (typeof PORTAL_CAPABILITIES)[number];

export const MIN_LIFETIME_SECONDS = 3_600;
export const MAX_LIFETIME_SECONDS = 7 * 86_400;
export const DEFAULT_LIFETIME_SECONDS = 86_400;
export const MAX_ENDPOINTS = 50;

/** One-time tokens look like `pps_<43 base64url chars>`: 256 random bits, recognisable in leaks. */
const TOKEN_PREFIX = 'pps_';
/** The cookie the token is exchanged for. */
export const COOKIE_NAME = 'portal_session';

/**
 * Token and cookie carry 256 random bits, so a fast hash is enough: there is nothing to
 * brute-force, and the stored hash opens nothing.
 */
function digest(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/**
 * The CSRF token of a session: derived from its cookie secret, which a page of another
 * origin can neither read nor guess, and handed to the portal's own page by a same-origin
 * read (GET /portal/session). A cross-site form or fetch carries the cookie but cannot know
 * this header's value.
 */
export function csrfTokenOf(cookieSecret: string): string {
  return createHash('sha256').update(`csrf:${cookieSecret}`).digest('base64url');
}

export interface SessionView {
  id: string;
  organizationId: string;
  capabilities: string[];
  endpointIds: string[];
  createdAt: Date;
  expiresAt: Date;
  revokedAt: Date | null;
  createdBy: string;
}

export interface MintRequest {
  organizationId: string;
  lifetimeSeconds: number;
  capabilities: readonly string[];
  endpointIds: readonly string[];
  createdBy: string;
}

const COLUMNS = ['id', 'organization_id', 'capabilities', 'endpoint_ids', 'created_at', 'expires_at', 'revoked_at', 'created_by'] as const;

type Row = Pick<Tables['portal_sessions'], (typeof COLUMNS)[number]>;

function viewOf(row: Row): SessionView {
  return {
    id: row.id,
    organizationId: row.organization_id,
    capabilities: row.capabilities,
    endpointIds: row.endpoint_ids ?? [],
    createdAt: new Date(row.created_at),
    expiresAt: new Date(row.expires_at),
    revokedAt: row.revoked_at ? new Date(row.revoked_at) : null,
    createdBy: row.created_by,
  };
}

/** Checks a mint request; throws its refusal. Returns the capabilities as stored ("read" always among them). */
function checkedCapabilities(request: MintRequest): string[] {
  if (request.lifetimeSeconds < MIN_LIFETIME_SECONDS || request.lifetimeSeconds > MAX_LIFETIME_SECONDS) {
    throw apiError('PORTAL_SESSION_LIFETIME_INVALID', `A portal session lasts from ${MIN_LIFETIME_SECONDS} to ${MAX_LIFETIME_SECONDS} seconds.`);
  }
  for (const capability of request.capabilities) {
    if (!(PORTAL_CAPABILITIES as readonly string[]).includes(capability)) {
      throw apiError('PORTAL_CAPABILITY_INVALID', `"${capability.slice(0, 64)}" is not a portal capability: use ${PORTAL_CAPABILITIES.join(', ')}.`);
    }
  }
  if (request.endpointIds.length > MAX_ENDPOINTS || request.endpointIds.some((id) => !isUuid(id))) {
    throw apiError('PORTAL_ENDPOINTS_INVALID', `A portal session names at most ${MAX_ENDPOINTS} endpoint ids.`);
  }
  return PORTAL_CAPABILITIES.filter((c) => c === 'read' || request.capabilities.includes(c));
}

/** The portal's sessions: minting, revoking, the token's exchange, and the cookie's authentication. */
export class PortalSessions implements PortalAuthentication {
  constructor(private readonly now: () => number) {}

  /** Stores a new session (only the token's hash) and returns it with its token, shown this once. */
  async mint(em: EntityManager, request: MintRequest): Promise<{ session: SessionView; token: string }> {
    const capabilities = checkedCapabilities(request);
    const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
    const now = this.now();
    return em.transactional(async (tx) => {
      const k = db(tx);
      const organization = await tx.execute<{ id: string }[]>('select id from organizations where id = ?', [request.organizationId]);
      if (organization.length === 0) throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${request.organizationId.slice(0, 64)}.`);
      const endpointIds = [...new Set(request.endpointIds)];
      if (endpointIds.length > 0) {
        const found = await sql<{ n: number }>`select count(*)::int as n from webhook_endpoints
           where organization_id = ${request.organizationId} and id = any(${endpointIds}::uuid[])`.execute(k);
        if (found.rows[0]?.n !== endpointIds.length) throw apiError('PORTAL_ENDPOINTS_INVALID', "Every endpoint id must name one of the organization's endpoints.");
      }
      const row = await k
        .insertInto('portal_sessions')
        .values({
          id: randomUUID(),
          organization_id: request.organizationId,
          token_hash: digest(token),
          capabilities,
          endpoint_ids: endpointIds.length > 0 ? endpointIds : null,
          created_by: request.createdBy,
          created_at: new Date(now),
          expires_at: new Date(now + request.lifetimeSeconds * 1000),
        })
        .returning(COLUMNS)
        .executeTakeFirstOrThrow();
      return { session: viewOf(row), token };
    });
  }

  async revoke(em: EntityManager, organizationId: string, sessionId: string): Promise<SessionView> {
    const k = db(em);
    if (isUuid(sessionId)) {
      await k
        .updateTable('portal_sessions')
        .set({ revoked_at: new Date(this.now()) })
        .where('id', '=', sessionId)
        .where('organization_id', '=', organizationId)
        .where('revoked_at', 'is', null)
        .execute();
      const row = await k.selectFrom('portal_sessions').select(COLUMNS).where('id', '=', sessionId).where('organization_id', '=', organizationId).executeTakeFirst();
      if (row) return viewOf(row);
    }
    throw apiError('PORTAL_SESSION_NOT_FOUND', `No portal session ${sessionId.slice(0, 64)} in this organization.`);
  }

  /** Ends every session of the organization that is still open; returns how many. */
  async revokeAll(em: EntityManager, organizationId: string): Promise<number> {
    const now = new Date(this.now());
    const result = await db(em)
      .updateTable('portal_sessions')
      .set({ revoked_at: now })
      .where('organization_id', '=', organizationId)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .executeTakeFirst();
    return Number(result.numUpdatedRows);
  }

  /**
   * Exchanges a one-time token for the session's cookie secret: the token works once, and
   * the cookie is what every later call presents. Refused with the session's state.
   */
  async exchange(em: EntityManager, token: string): Promise<{ cookieSecret: string; expiresAt: Date }> {
    if (!token.startsWith(TOKEN_PREFIX) || token.length > 128) throw apiError('PORTAL_SESSION_INVALID', 'This portal link is not valid.');
    const cookieSecret = randomBytes(32).toString('base64url');
    const now = new Date(this.now());
    const k = db(em);
    const exchanged = await k
      .updateTable('portal_sessions')
      .set({ cookie_hash: digest(cookieSecret), exchanged_at: now })
      .where('token_hash', '=', digest(token))
      .where('exchanged_at', 'is', null)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .returning('expires_at')
      .executeTakeFirst();
    if (exchanged) return { cookieSecret, expiresAt: new Date(exchanged.expires_at) };
    const row = await k.selectFrom('portal_sessions').select(['revoked_at', 'expires_at', 'exchanged_at']).where('token_hash', '=', digest(token)).executeTakeFirst();
    if (!row) throw apiError('PORTAL_SESSION_INVALID', 'This portal link is not valid.');
    refuseEnded(row, now.getTime());
    throw apiError('PORTAL_TOKEN_USED', 'This portal link has been used already; ask for a new one.');
  }

  carriesCookie(cookieHeader: string | null): boolean {
    return cookieSecretOf(cookieHeader) !== null;
  }

  /**
   * The session behind a cookie, looked up on every call (a revocation or expiry is refused
   * at once: nothing is cached), with the CSRF token every cookie call must send.
   */
  async authenticate(em: EntityManager, cookieHeader: string | null, csrfHeader: string | null): Promise<PortalPrincipal> {
    const session = await this.session(em, cookieHeader);
    const secret = cookieSecretOf(cookieHeader) ?? '';
    const expected = Buffer.from(csrfTokenOf(secret));
    const presented = Buffer.from(csrfHeader ?? '');
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
      throw apiError('CSRF_TOKEN_INVALID', 'A call made with the portal cookie must send its x-csrf-token header.');
    }
    return session;
  }

  /** The open session behind a cookie, without the CSRF check (the portal page's own GET). */
  async session(em: EntityManager, cookieHeader: string | null): Promise<PortalPrincipal> {
    const secret = cookieSecretOf(cookieHeader);
    if (!secret) throw apiError('PORTAL_SESSION_INVALID', 'No portal session.');
    const row = await db(em)
      .selectFrom('portal_sessions')
      .select(['id', 'organization_id', 'capabilities', 'endpoint_ids', 'revoked_at', 'expires_at'])
      .where('cookie_hash', '=', digest(secret))
      .executeTakeFirst();
    if (!row) throw apiError('PORTAL_SESSION_INVALID', 'This portal session is not valid.');
    refuseEnded(row, this.now());
    return {
      kind: 'portal',
      organizationId: row.organization_id,
      sessionId: row.id,
      capabilities: row.capabilities,
      endpointIds: row.endpoint_ids && row.endpoint_ids.length > 0 ? row.endpoint_ids : null,
    };
  }
}

function refuseEnded(row: { revoked_at: Date | string | null; expires_at: Date | string }, now: number): void {
  if (row.revoked_at) throw apiError('PORTAL_SESSION_REVOKED', 'This portal session has been revoked.');
  if (new Date(row.expires_at).getTime() <= now) throw apiError('PORTAL_SESSION_EXPIRED', 'This portal session has expired.');
}

/** The portal cookie's value in a Cookie header, or null. */
export function cookieSecretOf(cookieHeader: string | null): string | null {
  if (!cookieHeader) return null;
  for (const part of cookieHeader.split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (name === COOKIE_NAME) {
      const value = rest.join('=');
      return /^[A-Za-z0-9_-]{43}$/.test(value) ? value : null;
    }
  }
  return null;
}
