import { SIGNATURE_SCHEMES, type SignatureScheme, type WebhookEndpoint } from '../db';
import { apiError } from '../errors';
import { newSigningSecret, type SecretBox } from '../secrets';
import { overlapRunning } from '../signatures';

/** How long the previous secret keeps signing after a rotation, unless the caller says otherwise. */
export const DEFAULT_OVERLAP_SECONDS = 24 * 60 * 60;
/** Longer would keep a possibly leaked secret signing for more than a week. */
export const MAX_OVERLAP_SECONDS = 7 * 24 * 60 * 60;

/** A scheme as a request names it, or SIGNATURE_SCHEME_INVALID. */
export function signatureSchemeOf(value: string): SignatureScheme {
  const scheme = value.trim();
  if (!(SIGNATURE_SCHEMES as readonly string[]).includes(scheme)) {
    throw apiError('SIGNATURE_SCHEME_INVALID', `The signature scheme must be one of ${SIGNATURE_SCHEMES.join(', ')}.`);
  }
  return scheme as SignatureScheme;
}

/** The overlap a request asks for, in seconds: the default when unset, else 0 to MAX_OVERLAP_SECONDS. */
export function overlapSecondsOf(value: number | undefined): number {
  if (value === undefined) return DEFAULT_OVERLAP_SECONDS;
  if (!Number.isInteger(value) || value < 0 || value > MAX_OVERLAP_SECONDS) {
    throw apiError('ROTATION_OVERLAP_INVALID', `overlapSeconds must be between 0 and ${MAX_OVERLAP_SECONDS} (7 days).`);
  }
  return value;
}

/** A new secret in the form its scheme verifies with: Standard Webhooks libraries decode the standard form. */
export function newSecretFor(scheme: SignatureScheme): string {
  return newSigningSecret(scheme === 'legacy' ? 'legacy' : 'standard');
}

/**
 * Gives a locked endpoint a new secret (and scheme), keeping the one it had signing until
 * the overlap ends; answers the new secret, which is shown once and stored sealed. A
 * rotation during an overlap is refused: a receiver that has not switched keeps verifying
 * until the end it was told, whatever else is asked meanwhile.
 */
export function rotateSigningSecret(
  endpoint: WebhookEndpoint,
  change: { scheme: SignatureScheme; overlapSeconds: number; now: number },
  secrets: SecretBox,
): string {
  const endsAtMs = endpoint.rotationEndsAt ? endpoint.rotationEndsAt.getTime() : null;
  if (overlapRunning(endsAtMs, change.now)) {
    throw apiError('SECRET_ROTATION_IN_PROGRESS', `A rotation of this endpoint's secret runs until ${new Date(endsAtMs!).toISOString()}; rotate again after it ends.`, {
      metadata: { endsAt: new Date(endsAtMs!).toISOString() },
    });
  }
  const secret = newSecretFor(change.scheme);
  const sealed = secrets.seal(secret, endpoint.id);
  const keep = change.overlapSeconds > 0;
  // The sealed secret moves over as it is: it was bound to this endpoint's id, like the new one.
  endpoint.previousSecretKeyId = keep ? endpoint.secretKeyId : null;
  endpoint.previousSecretCiphertext = keep ? endpoint.secretCiphertext : null;
  endpoint.previousSignatureScheme = keep ? endpoint.signatureScheme : null;
  endpoint.rotationStartedAt = keep ? new Date(change.now) : null;
  endpoint.rotationEndsAt = keep ? new Date(change.now + change.overlapSeconds * 1000) : null;
  endpoint.secretKeyId = sealed.keyId;
  endpoint.secretCiphertext = sealed.ciphertext;
  endpoint.signatureScheme = change.scheme;
  return secret;
}
