export { WebhookServiceImpl, type WebhookServiceDeps } from './service';
export { SecretBox, newSigningSecret } from './secret-box';
export { WebhookRateLimiter } from './rate-limit';
export { validateEndpointUrl } from './endpoint-url';
export { rotateSigningSecrets } from './rotation';
