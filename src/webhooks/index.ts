export { WebhookServiceImpl, deliveryMessage, timestampOf, type WebhookServiceDeps } from './service';
export { organizationEndpoint } from './endpoints';
export { FailingEndpointPause, type AutoPauseOptions } from './auto-pause';
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
