import type { HandlerContext } from '@connectrpc/connect';
import { apiError } from '../errors';
import { principalKey, type CustomerPrincipal, type InternalServicePrincipal } from './principal';

/** The calling customer; the auth interceptor guarantees one on every public RPC. */
export function requireCustomer(ctx: Pick<HandlerContext, 'values'>): CustomerPrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'customer') throw apiError('AUTHENTICATION_REQUIRED', 'An API key is required.');
  return principal;
}

/** The calling internal service; the auth interceptor guarantees one on internal RPCs. */
export function requireInternalService(ctx: Pick<HandlerContext, 'values'>): InternalServicePrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'internal') throw apiError('INTERNAL_CREDENTIAL_REQUIRED', 'An internal service credential is required.');
  return principal;
}
