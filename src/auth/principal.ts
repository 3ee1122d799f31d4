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

/**
 * A person in the customer portal: a portal session of one organization, allowed what its
 * capabilities name (the `portal_capability` of each RPC's access rule) and, when
 * `endpointIds` is set, only on those endpoints.
 */
export interface PortalPrincipal {
  kind: 'portal';
  organizationId: string;
  sessionId: string;
  capabilities: readonly string[];
  endpointIds: readonly string[] | null;
}

/** A caller acting for one organization: an API key or a portal session. */
export type TenantPrincipal = CustomerPrincipal | PortalPrincipal;

export type Principal = CustomerPrincipal | PortalPrincipal | OperatorPrincipal | InternalServicePrincipal;

/** Who the audit trail names for a tenant's call: the key and its user, or the portal session. */
export function auditActorOf(principal: TenantPrincipal): {
  organizationId: string;
  actorUserId: string | null;
  apiKeyId: string | null;
  portalSessionId: string | null;
} {
  return principal.kind === 'customer'
    ? { organizationId: principal.organizationId, actorUserId: principal.userId, apiKeyId: principal.apiKeyId, portalSessionId: null }
    : { organizationId: principal.organizationId, actorUserId: null, apiKeyId: null, portalSessionId: principal.sessionId };
}

/** How records written for a tenant (a recovery job's requester) name who asked. */
export function requesterOf(principal: TenantPrincipal): string {
  return principal.kind === 'customer' ? `user:${principal.userId}` : `portal:${principal.sessionId}`;
}

export const principalKey = createContextKey<Principal | null>(null, { description: 'principal' });
