export {
  signatureFor,
  standardSignatureFor,
  signedHeaders,
  deliveryHeaders,
  overlapRunning,
  SIGNATURE_HEADER,
  TIMESTAMP_HEADER,
  NEXT_SIGNATURE_HEADER,
  STANDARD_ID_HEADER,
  STANDARD_TIMESTAMP_HEADER,
  STANDARD_SIGNATURE_HEADER,
  type SigningKey,
  type DeliverySigning,
} from './signing';
export { verifyWebhook, WebhookVerificationError, type WebhookVerificationCode, type VerifyOptions } from './verify';
