import { timingSafeEqual, createHash } from 'node:crypto';
import type { HandlerContext, Interceptor } from '@connectrpc/connect';
import { entityManagerKey } from '../db';
import { apiError } from '../errors';
import { accessOf } from './access';
import { authenticate } from './api-keys';
import { ROLE_PERMISSIONS, isPermission } from './permissions';
import { principalKey, type PortalPrincipal } from './principal';
import type { PrincipalCache } from './principal-cache';

export interface AuthOptions {
  operatorToken: string;
  /** Fully qualified names of services open to anyone (health). */
  openServices: readonly string[];
  /** Fully qualified names of services that take the operator credential. */
  operatorServices: readonly string[];
  /** Fully qualified names of services that take an internal service credential. */
  internalServices: readonly string[];
  internalTokens: readonly { name: string; token: string }[];
  /** Authenticated keys kept between calls; every call looks its key up without it. */
  principals?: PrincipalCache;
  /** Services that take the operator credential as well as an internal one (portal sessions). */
  operatorOrInternalServices?: readonly string[];
  /** Authenticates a customer-portal cookie; without it, cookies are not read. */
  portal?: PortalAuthentication;
}

/**
 * The portal's cookie authentication (src/portal): the session's principal, or the
 * refusal's code. Called when a call carries no Authorization header.
 */
export interface PortalAuthentication {
  /** Whether the request carries the portal's session cookie at all. */
  carriesCookie(cookieHeader: string | null): boolean;
  authenticate(em: Parameters<typeof authenticate>[0], cookieHeader: string | null, csrfHeader: string | null): Promise<PortalPrincipal>;
}

function bearerOf(header: string | null): string | null {
  const match = /^Bearer[ ]+([^\s]+)\s*$/i.exec(header ?? '');
  return match?.[1] ?? null;
}

function sameSecret(a: string, b: string): boolean {
  // Compare digests so the comparison time does not depend on where the strings differ.
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

/** What the authentication gate reads and fills: the call's service, headers and values. */
export type GateContext = Pick<HandlerContext, 'service' | 'requestHeader' | 'values'>;

/**
 * The internal service whose token was presented, or null. Every configured token is
 * compared, in constant time, whichever matches: the time taken says nothing about which
 * token (or how much of one) was right.
 */
function internalServiceOf(presented: string | null, tokens: AuthOptions['internalTokens']): string | null {
  if (presented === null) return null;
  let name: string | null = null;
  for (const entry of tokens) if (sameSecret(presented, entry.token)) name = entry.name;
  return name;
}

/**
 * Establishes who is calling. Customer RPCs take `Authorization: Bearer <api key>`
 * (gRPC metadata `authorization`); operator RPCs take the operator credential and
 * internal RPCs an internal service credential; a customer key opens neither.
 *
 * A request gate, not an interceptor: it runs once the headers are in and before the
 * body is read or decoded, so an unauthenticated caller is refused 401 whatever it sent
 * and its body is never parsed.
 */
export function createAuthGate(options: AuthOptions): (ctx: GateContext) => Promise<void> {
  return async (ctx) => {
    const service = ctx.service.typeName;
    if (options.openServices.includes(service)) return;

    const presented = bearerOf(ctx.requestHeader.get('authorization'));
    if (options.operatorServices.includes(service)) {
      if (!presented || !sameSecret(presented, options.operatorToken)) {
        throw apiError('OPERATOR_CREDENTIAL_REQUIRED', 'The operator credential is required.');
      }
      ctx.values.set(principalKey, { kind: 'operator' });
      return;
    }
    if (options.internalServices.includes(service)) {
      const name = internalServiceOf(presented, options.internalTokens);
      if (name === null && presented && options.operatorOrInternalServices?.includes(service) && sameSecret(presented, options.operatorToken)) {
        ctx.values.set(principalKey, { kind: 'operator' });
        return;
      }
      if (name === null) throw apiError('INTERNAL_CREDENTIAL_REQUIRED', 'An internal service credential is required.');
      ctx.values.set(principalKey, { kind: 'internal', name });
      return;
    }

    const cookie = ctx.requestHeader.get('cookie');
    if (!ctx.requestHeader.get('authorization') && options.portal?.carriesCookie(cookie)) {
      const em = ctx.values.get(entityManagerKey);
      if (!em) throw new Error('request context has no EntityManager');
      ctx.values.set(principalKey, await options.portal.authenticate(em, cookie, ctx.requestHeader.get('x-csrf-token')));
      return;
    }
    if (!ctx.requestHeader.get('authorization')) {
      throw apiError('AUTHENTICATION_REQUIRED', 'An API key is required: send "Authorization: Bearer <key>".');
    }
    if (!presented) throw apiError('API_KEY_INVALID', 'The Authorization header must be "Bearer <key>".');
    const em = ctx.values.get(entityManagerKey);
    if (!em) throw new Error('request context has no EntityManager');
    const result = await authenticate(em, presented, options.principals);
    if (!result.ok) {
      throw apiError(
        result.code,
        result.code === 'API_KEY_REVOKED' ? 'This API key has been revoked.' : 'This API key is not valid.',
      );
    }
    ctx.values.set(principalKey, result.principal);
  };
}

/**
 * Checks the permission the RPC's access rule names: it must be in the key's scopes
 * and granted by the owner's role. Runs inside the audit interceptor so that refusals
 * of audited actions are recorded.
 */
export function createAuthorizeInterceptor(): Interceptor {
  return (next) => async (req) => {
    const principal = req.contextValues.get(principalKey);
    if (principal?.kind === 'portal') return authorizePortal(principal, req, next);
    if (principal?.kind !== 'customer') return next(req);
    const permission = accessOf(req.method).permission;
    if (!isPermission(permission)) {
      throw apiError('PERMISSION_DENIED', `${req.method.name} is not available to API keys.`);
    }
    if (!principal.scopes.includes(permission)) {
      throw apiError('SCOPE_MISSING', `This API key lacks the ${permission} scope.`, { metadata: { scope: permission } });
    }
    if (!ROLE_PERMISSIONS[principal.role].includes(permission)) {
      throw apiError('PERMISSION_DENIED', `The ${principal.role} role does not grant ${permission}.`, {
        metadata: { permission, role: principal.role },
      });
    }
    return next(req);
  };
}

/** The request field that names an endpoint on the webhook routes. */
const ENDPOINT_FIELD = 'id';

/**
 * A portal session may call an RPC whose access rule names a capability it holds. Narrowed
 * to endpoints, it may name only those (another is answered as an unknown endpoint, as
 * another organization's is), and it may change nothing that names no endpoint (create).
 * Without the `secrets` capability, a secret minted by the call is not shown.
 */
type Next = Parameters<Interceptor>[0];

async function authorizePortal(principal: PortalPrincipal, req: Parameters<Next>[0], next: Next): ReturnType<Next> {
  const capability = accessOf(req.method).portalCapability;
  if (!capability || !principal.capabilities.includes(capability)) {
    throw apiError('PERMISSION_DENIED', `This portal session may not call ${req.method.name}.`, {
      metadata: { capability: capability || 'none' },
    });
  }
  if (principal.endpointIds !== null) {
    const field = req.method.input.field[ENDPOINT_FIELD];
    if (field) {
      const id = req.stream ? '' : String((req.message as Record<string, unknown>)[field.localName] ?? '');
      if (!principal.endpointIds.includes(id)) throw apiError('WEBHOOK_NOT_FOUND', `No webhook endpoint ${id.slice(0, 64)} in this organization.`);
    } else if (capability !== 'read') {
      throw apiError('PERMISSION_DENIED', `A portal session narrowed to endpoints may not call ${req.method.name}.`);
    }
  }
  const res = await next(req);
  if (!res.stream && !principal.capabilities.includes('secrets') && 'signingSecret' in res.message) {
    (res.message as { signingSecret: string }).signingSecret = '';
  }
  return res;
}
