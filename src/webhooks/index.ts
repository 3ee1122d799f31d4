export { WebhookServiceImpl, type WebhookServiceDeps } from './service';
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
} from './plans';
export { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH } from './event-names';
