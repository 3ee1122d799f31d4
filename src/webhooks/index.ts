export { WebhookServiceImpl, deliveryMessage, timestampOf, type WebhookServiceDeps } from './service';
export { WebhookRateLimiter } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
