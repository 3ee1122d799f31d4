import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';

/**
 * Webhook signing secrets at rest: AES-256-GCM under a key named by id, so keys can be
 * rotated (new secrets use the current key; old ones still open until re-encrypted).
 * The endpoint id is bound in as associated data, so a ciphertext copied onto another
 * endpoint's row does not decrypt.
 */
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

export interface SealedSecret {
  keyId: string;
  ciphertext: Buffer;
}

export class SecretBox {
  /** Key objects made once: building one from raw bytes on every seal costs more than the sealing. */
  private readonly keys: ReadonlyMap<string, KeyObject>;

  constructor(
    keys: ReadonlyMap<string, Buffer>,
    readonly currentKeyId: string,
  ) {
    if (!keys.has(currentKeyId)) throw new Error(`no secret encryption key "${currentKeyId}"`);
    this.keys = new Map([...keys].map(([id, key]) => [id, createSecretKey(key)]));
  }

  seal(secret: string, endpointId: string): SealedSecret {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key(this.currentKeyId), nonce);
    cipher.setAAD(Buffer.from(endpointId));
    const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
    return { keyId: this.currentKeyId, ciphertext: Buffer.concat([nonce, body, cipher.getAuthTag()]) };
  }

  open(sealed: SealedSecret, endpointId: string): string {
    const nonce = sealed.ciphertext.subarray(0, NONCE_BYTES);
    const tag = sealed.ciphertext.subarray(sealed.ciphertext.length - TAG_BYTES);
    const body = sealed.ciphertext.subarray(NONCE_BYTES, sealed.ciphertext.length - TAG_BYTES);
    const decipher = createDecipheriv('aes-256-gcm', this.key(sealed.keyId), nonce);
    decipher.setAAD(Buffer.from(endpointId));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(body), decipher.final()]).toString('utf8');
  }

  private key(id: string): KeyObject {
    const key = this.keys.get(id);
    if (!key) throw new Error(`no secret encryption key "${id}"`);
    return key;
  }
}

/**
 * A new signing secret: 32 random bytes, prefixed so it is recognisable in leaks. `legacy`
 * keeps the seed's form (base64url), which legacy receivers key with as a whole string;
 * `standard` is the Standard Webhooks form (base64, padded), whose decoded bytes are the
 * key, and which legacy receivers can still use as a whole string.
 */
export function newSigningSecret(form: 'legacy' | 'standard' = 'legacy'): string {
  return `whsec_${randomBytes(32).toString(form === 'legacy' ? 'base64url' : 'base64')}`;
}
