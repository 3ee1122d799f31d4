export { PERMISSIONS, ROLE_PERMISSIONS, isPermission, canConfirmChangedAccount, type Permission } from './permissions';
export {
  principalKey,
  auditActorOf,
  requesterOf,
  type Principal,
  type CustomerPrincipal,
  type PortalPrincipal,
  type TenantPrincipal,
  type OperatorPrincipal,
  type InternalServicePrincipal,
} from './principal';
export { issueApiKey, revokeApiKey, authenticate, hashKey, type IssuedKey } from './api-keys';
export { PrincipalCache, PRINCIPAL_CHANNEL } from './principal-cache';
export { createAuthGate, createAuthorizeInterceptor, type GateContext, type PortalAuthentication } from './interceptor';
export { requireCustomer, requireInternalService, requireTenant } from './require';
export { createOrganization, createUser, developmentOrganization, isPlan, isRole, setMonthlyDeliveryQuota } from './identity';
export { accessOf } from './access';
