import { createContextKey } from '@connectrpc/connect';
import type { Role } from '../db/entities';

/** Who is calling: a customer's API key, bound to one user in one organization. */
export interface CustomerPrincipal {
  kind: 'customer';
  organizationId: string;
  userId: string;
  role: Role;
  apiKeyId: string;
  scopes: readonly string[];
}

export interface OperatorPrincipal {
  kind: 'operator';
}

export type Principal = CustomerPrincipal | OperatorPrincipal;

export const principalKey = createContextKey<Principal | null>(null, { description: 'principal' });
