export { signatureFor, signedHeaders, SIGNATURE_HEADER, TIMESTAMP_HEADER } from './signing';
export { verifyWebhook, WebhookVerificationError, type WebhookVerificationCode, type VerifyOptions } from './verify';
