export { WebhookServiceImpl, deliveryMessage, timestampOf, type WebhookServiceDeps } from './service';
export { organizationEndpoint } from './endpoints';
export { WebhookRateLimiter } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
export { rotateSigningSecrets } from './rotation';
export {
  PLANS_WITHOUT_DELIVERIES,
  planIncludesDeliveries,
  deliveryMonthOf,
  quotaRefusalOf,
  publishingOrganizations,
  createDeliveryCounts,
  takeDeliveryQuota,
  type PublishingOrganizationRow,
} from './plans';
export { subscribedEndpoints, deliveryGrants, type NewEventRow, type SubscribedRow, type GrantedRow } from './subscriptions';
export { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH } from './event-names';
export { RETENTION_BY_PLAN, payloadHorizonOf, youngestHorizons, organizationRetention, type RetentionPeriods, type RetentionRow } from './retention';
