import { Migration } from '@mikro-orm/migrations';

/**
 * Notices for the API key cache (src/auth/principal-cache.ts): a commit that changes
 * anything a principal is made of (a key's owner, hash, scopes or revocation, a user's
 * organization or role, or removes either) notifies `principal_changed`, and every
 * instance empties its cache. Statement-level, at commit, whichever program made the
 * change: the service, the admin CLI, or SQL typed by an operator. `last_used_at` is left
 * out on purpose: recording a use must not empty the cache.
 */
export class Migration20261121000001PrincipalNotices extends Migration {
  override name = 'Migration20261121000001PrincipalNotices';

  override up(): void {
    this.addSql(`
create function notify_principal_changed() returns trigger language plpgsql as $$
begin
  perform pg_notify('principal_changed', tg_table_name);
  return null;
end $$;`);
    this.addSql(`
create trigger api_keys_principal_changed
  after update of organization_id, user_id, key_hash, scopes, revoked_at or delete or truncate on api_keys
  for each statement execute function notify_principal_changed();`);
    this.addSql(`
create trigger users_principal_changed
  after update of organization_id, role or delete or truncate on users
  for each statement execute function notify_principal_changed();`);
  }

  override down(): void {
    this.addSql('drop trigger if exists users_principal_changed on users;');
    this.addSql('drop trigger if exists api_keys_principal_changed on api_keys;');
    this.addSql('drop function if exists notify_principal_changed();');
  }
}
