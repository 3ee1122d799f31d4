import type { EntityManager } from '../db';
import type { SecretBox } from '../secrets';

interface SealedSecrets {
  id: string;
  secret_key_id: string;
  secret_ciphertext: Buffer;
  previous_secret_key_id: string | null;
  previous_secret_ciphertext: Buffer | null;
}

/**
 * Re-encrypts every signing secret not yet under the current key: an endpoint's secret, and
 * the previous one a rotation keeps signing during its overlap. The service keeps running
 * meanwhile: SECRET_ENCRYPTION_KEYS lists the new key first and the old ones after it, so
 * every secret opens whichever key it is under. Each row is updated only if it still holds
 * the ciphertexts that were read, so a concurrent change (a rotation, say) is never lost.
 */
export async function rotateSigningSecrets(em: EntityManager, secrets: SecretBox, batchSize = 500): Promise<number> {
  let rotated = 0;
  for (;;) {
    const rows = await em.execute<SealedSecrets[]>(
      `select id, secret_key_id, secret_ciphertext, previous_secret_key_id, previous_secret_ciphertext from webhook_endpoints
        where secret_key_id <> ? or previous_secret_key_id <> ? order by id limit ?`,
      [secrets.currentKeyId, secrets.currentKeyId, batchSize],
    );
    if (rows.length === 0) return rotated;
    for (const row of rows) {
      const reseal = (keyId: string, ciphertext: Buffer) => secrets.seal(secrets.open({ keyId, ciphertext }, row.id), row.id);
      const ciphertext = Buffer.from(row.secret_ciphertext);
      const previousCiphertext = row.previous_secret_ciphertext && Buffer.from(row.previous_secret_ciphertext);
      const sealed = reseal(row.secret_key_id, ciphertext);
      const previous = row.previous_secret_key_id && previousCiphertext ? reseal(row.previous_secret_key_id, previousCiphertext) : null;
      const result = await em.execute<{ affectedRows: number }>(
        `update webhook_endpoints
            set secret_key_id = ?, secret_ciphertext = ?, previous_secret_key_id = ?, previous_secret_ciphertext = ?, updated_at = now()
          where id = ? and secret_key_id = ? and secret_ciphertext = ? and previous_secret_ciphertext is not distinct from ?`,
        [sealed.keyId, sealed.ciphertext, previous?.keyId ?? null, previous?.ciphertext ?? null, row.id, row.secret_key_id, ciphertext, previousCiphertext],
        'run',
      );
      rotated += result.affectedRows;
    }
  }
}
