export { PERMISSIONS, ROLE_PERMISSIONS, isPermission, canConfirmChangedAccount, type Permission } from './permissions';
export { principalKey, type Principal, type CustomerPrincipal, type OperatorPrincipal, type InternalServicePrincipal } from './principal';
export { issueApiKey, revokeApiKey, authenticate, hashKey, type IssuedKey } from './api-keys';
export { PrincipalCache, PRINCIPAL_CHANNEL } from './principal-cache';
export { createAuthGate, createAuthorizeInterceptor, type GateContext } from './interceptor';
export { requireCustomer, requireInternalService } from './require';
export { createOrganization, createUser, developmentOrganization, isPlan, isRole, setMonthlyDeliveryQuota } from './identity';
export { accessOf } from './access';
