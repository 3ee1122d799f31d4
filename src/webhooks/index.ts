export { WebhookServiceImpl, deliveryMessage, timestampOf, type WebhookServiceDeps } from './service';
export { organizationEndpoint } from './endpoints';
export { WebhookRateLimiter } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
export { rotateSigningSecrets } from './rotation';
export {
  PLANS_WITHOUT_DELIVERIES,
  planIncludesDeliveries,
  deliveriesCountedThisMonth,
  deliveryMonthOf,
  quotaRefusalOf,
  monthlyDeliveryLimitSql,
  quotaRefusalSql,
  deliveryQuotaTakeSql,
  createDeliveryCounts,
  takeDeliveryQuota,
} from './plans';
export { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH } from './event-names';
