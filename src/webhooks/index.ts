export { WebhookServiceImpl, deliveryMessage, type WebhookServiceDeps } from './service';
export { SecretBox, newSigningSecret } from './secret-box';
export { WebhookRateLimiter, WEBHOOK_BUCKET } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
export { MONTHLY_DELIVERIES, monthlyLimitOf } from './plans';
export { DOCUMENTED_EVENTS, EVENT_NAME_PATTERN } from './event-names';
export { rotateSigningSecrets } from './rotation';
