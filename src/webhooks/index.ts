export { WebhookServiceImpl, deliveryMessage, timestampOf, type WebhookServiceDeps } from './service';
export { FailingEndpointPause, type AutoPauseOptions } from './auto-pause';
export { WebhookRateLimiter } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
