import type { HandlerContext } from '@connectrpc/connect';
import { apiError } from '../errors';
import { principalKey, type CustomerPrincipal } from './principal';

/** The calling customer; the auth interceptor guarantees one on every public RPC. */
export function requireCustomer(ctx: Pick<HandlerContext, 'values'>): CustomerPrincipal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== 'customer') throw apiError('AUTHENTICATION_REQUIRED', 'An API key is required.');
  return principal;
}
