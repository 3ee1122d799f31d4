import type { HandlerContext } from '@connectrpc/connect';
import { apiError } from '../errors';
import { principalKey, type CustomerPrincipal, type InternalServicePrincipal, type TenantPrincipal } from './principal';

/** The calling customer; the auth interceptor guarantees one on every public RPC. */
export function requireCustomer(ctx: Pick<HandlerContext, 'values'>): CustomerPrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'customer') throw apiError('AUTHENTICATION_REQUIRED', 'An API key is required.');
  return principal;
}

/**
 * The calling tenant: an API key or a portal session. The authorize interceptor has
 * checked the session's capability and, for a session narrowed to endpoints, that the
 * endpoint the call names is one of them.
 */
export function requireTenant(ctx: Pick<HandlerContext, 'values'>): TenantPrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'customer' && principal?.kind !== 'portal') throw apiError('AUTHENTICATION_REQUIRED', 'An API key is required.');
  return principal;
}

/** The calling internal service; the auth interceptor guarantees one on internal RPCs. */
export function requireInternalService(ctx: Pick<HandlerContext, 'values'>): InternalServicePrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'internal') throw apiError('INTERNAL_CREDENTIAL_REQUIRED', 'An internal service credential is required.');
  return principal;
}
