export { SecretBox, newSigningSecret, type SealedSecret } from './secret-box';
