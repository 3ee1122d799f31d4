import { createContextKey } from '@connectrpc/connect';
import type { Role } from '../db';

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

/** Another service of the platform, named by the credential it presented (INTERNAL_SERVICE_TOKENS). */
export interface InternalServicePrincipal {
  kind: 'internal';
  name: string;
}

export type Principal = CustomerPrincipal | OperatorPrincipal | InternalServicePrincipal;

export const principalKey = createContextKey<Principal | null>(null, { description: 'principal' });
