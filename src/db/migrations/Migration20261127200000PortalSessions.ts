import { Migration } from '@mikro-orm/migrations';

/**
 * Portal sessions: short-lived, scoped access for an organization's people to the customer
 * portal. Neither the one-time token nor the cookie secret is stored, only their SHA-256
 * (both are 256 random bits). The audit trail names the session that acted.
 */
export class Migration20261127200000PortalSessions extends Migration {
  override name = 'Migration20261127200000PortalSessions';

  override up(): void {
    this.addSql(`
create table portal_sessions (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  token_hash text not null unique,
  cookie_hash text unique,
  capabilities text[] not null,
  endpoint_ids text[],
  created_by text not null,
  created_at timestamptz not null,
  expires_at timestamptz not null,
  exchanged_at timestamptz,
  revoked_at timestamptz
);`);
    this.addSql('create index portal_sessions_organization on portal_sessions (organization_id) where revoked_at is null;');
    this.addSql('alter table audit_events add column portal_session_id uuid;');
  }

  override down(): void {
    this.addSql('alter table audit_events drop column portal_session_id;');
    this.addSql('drop table portal_sessions;');
  }
}
