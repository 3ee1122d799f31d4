import type { EntityManager } from '../db';
import type { SecretBox } from '../secrets';

/**
 * Re-encrypts every signing secret not yet under the current key. The service keeps
 * running meanwhile: SECRET_ENCRYPTION_KEYS lists the new key first and the old ones
 * after it, so every secret opens whichever key it is under. Each row is updated only
 * if it still holds the ciphertext that was read, so a concurrent change is never lost.
 */
export async function rotateSigningSecrets(em: EntityManager, secrets: SecretBox, batchSize = 500): Promise<number> {
  let rotated = 0;
  for (;;) {
    const rows = await em.execute<{ id: string; secret_key_id: string; secret_ciphertext: Buffer }[]>(
      'select id, secret_key_id, secret_ciphertext from webhook_endpoints where secret_key_id <> ? order by id limit ?',
      [secrets.currentKeyId, batchSize],
    );
    if (rows.length === 0) return rotated;
    for (const row of rows) {
      const ciphertext = Buffer.from(row.secret_ciphertext);
      const secret = secrets.open({ keyId: row.secret_key_id, ciphertext }, row.id);
      const sealed = secrets.seal(secret, row.id);
      const result = await em.execute<{ affectedRows: number }>(
        `update webhook_endpoints set secret_key_id = ?, secret_ciphertext = ?, updated_at = now()
          where id = ? and secret_key_id = ? and secret_ciphertext = ?`,
        [sealed.keyId, sealed.ciphertext, row.id, row.secret_key_id, ciphertext],
        'run',
      );
      rotated += result.affectedRows;
    }
  }
}
