import { Migration } from '@mikro-orm/migrations';

/**
 * The service's own role (src/db/roles.ts): reads and writes every table but may only
 * insert into and read the audit trail, and only read the migration history. Default
 * privileges of the role running the migrations (the owner) give every table a later
 * migration creates the same grants, so a new table needs no grant of its own; a suite
 * (test/db/roles.test.ts) fails when one lacks them.
 */
export class Migration20261124100000ServiceRole extends Migration {
  override name = 'Migration20261124100000ServiceRole';

  override up(): void {
    this.addSql(`
do $$ begin
  if not exists (select 1 from pg_roles where rolname = 'publishing_service') then
    raise exception 'role publishing_service does not exist: create it before migrating (README, "Database roles")';
  end if;
end $$;`);
    this.addSql('grant usage on schema public to publishing_service;');
    this.addSql('grant select, insert, update, delete on all tables in schema public to publishing_service;');
    this.addSql('grant usage, select on all sequences in schema public to publishing_service;');
    this.addSql('revoke update, delete, truncate on audit_events from publishing_service;');
    this.addSql('revoke insert, update, delete, truncate on schema_migrations from publishing_service;');
    // No FOR ROLE: these apply to tables and sequences the role running migrations creates from now on.
    this.addSql('alter default privileges in schema public grant select, insert, update, delete on tables to publishing_service;');
    this.addSql('alter default privileges in schema public grant usage, select on sequences to publishing_service;');
  }

  override down(): void {
    this.addSql('alter default privileges in schema public revoke usage, select on sequences from publishing_service;');
    this.addSql('alter default privileges in schema public revoke select, insert, update, delete on tables from publishing_service;');
    this.addSql('revoke all on all sequences in schema public from publishing_service;');
    this.addSql('revoke all on all tables in schema public from publishing_service;');
    this.addSql('revoke usage on schema public from publishing_service;');
  }
}
