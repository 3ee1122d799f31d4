import { Migration } from '@mikro-orm/migrations';

/**
 * An endpoint's signature scheme, and the secret it had before a rotation, which keeps
 * signing until the overlap ends. Whether an overlap runs is decided by time when a
 * delivery is signed: nothing has to clear these columns when it ends. The previous
 * secret is sealed like the current one (same key ids, the endpoint id as associated data).
 */
export class Migration20261126000000SigningSchemes extends Migration {
  override name = 'Migration20261126000000SigningSchemes';

  override up(): void {
    this.addSql(`
alter table webhook_endpoints
  add column signature_scheme text not null default 'legacy' check (signature_scheme in ('legacy', 'standard', 'both')),
  add column previous_secret_key_id text,
  add column previous_secret_ciphertext bytea,
  add column previous_signature_scheme text check (previous_signature_scheme in ('legacy', 'standard', 'both')),
  add column rotation_started_at timestamptz,
  add column rotation_ends_at timestamptz,
  add constraint webhook_endpoints_previous_secret_whole check (
    (previous_secret_key_id is null) = (previous_secret_ciphertext is null)
    and (previous_secret_key_id is null) = (previous_signature_scheme is null)
    and (previous_secret_key_id is null) = (rotation_started_at is null)
    and (previous_secret_key_id is null) = (rotation_ends_at is null)
  );`);
  }

  override down(): void {
    this.addSql(`
alter table webhook_endpoints
  drop constraint webhook_endpoints_previous_secret_whole,
  drop column rotation_ends_at,
  drop column rotation_started_at,
  drop column previous_signature_scheme,
  drop column previous_secret_ciphertext,
  drop column previous_secret_key_id,
  drop column signature_scheme;`);
  }
}
