import { Migration } from '@mikro-orm/migrations';

/**
 * Customers get their deliveries again after an outage. A resend starts a new series of
 * attempts on the same delivery (the same event id, body and unique (endpoint, event id)),
 * so attempts are numbered within their series: 1 to 8 again, the primary key
 * (delivery_id, series, attempt). Every delivery and attempt recorded before is series 1.
 *
 * Each attempt keeps the class of its failure and a bounded excerpt of the receiver's
 * answer for the delivery log. A recovery job is a row, so it outlives the process that
 * took the request: the cursor (after_created_at, after_id) says how far it got, and the
 * unique window makes the same request answer with the same job.
 */
export class Migration20261126000000DeliveryRecovery extends Migration {
  override name = 'Migration20261126000000DeliveryRecovery';

  override up(): void {
    this.addSql('alter table webhook_deliveries add column series integer not null default 1 check (series >= 1);');
    this.addSql('alter table delivery_attempts add column series integer not null default 1 check (series >= 1);');
    this.addSql('alter table delivery_attempts drop constraint delivery_attempts_pkey;');
    this.addSql('alter table delivery_attempts add primary key (delivery_id, series, attempt);');
    this.addSql("alter table delivery_attempts add column error_class text check (error_class in ('http_status', 'timeout', 'tls', 'dns', 'connection', 'address_refused', 'invalid_url', 'interrupted'));");
    this.addSql('alter table delivery_attempts add column response_excerpt text check (length(response_excerpt) <= 1024);');
    this.addSql(`
create table recovery_jobs (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  endpoint_id uuid not null references webhook_endpoints (id),
  since timestamptz not null,
  until timestamptz not null,
  requested_until timestamptz,
  state text not null check (state in ('queued', 'running', 'finished', 'stopped')),
  found integer not null check (found >= 0),
  resent integer not null default 0 check (resent >= 0),
  stopped_reason text,
  after_created_at timestamptz,
  after_id uuid,
  next_batch_at timestamptz not null,
  requested_by text not null,
  created_at timestamptz not null,
  started_at timestamptz,
  finished_at timestamptz,
  updated_at timestamptz not null,
  constraint recovery_jobs_window_unique unique nulls not distinct (endpoint_id, since, requested_until)
);`);
    this.addSql(`create index recovery_jobs_open_idx on recovery_jobs (next_batch_at) where state in ('queued', 'running');`);
  }

  override down(): void {
    this.addSql('drop table recovery_jobs;');
    this.addSql('delete from delivery_attempts where series > 1;');
    this.addSql('alter table delivery_attempts drop column response_excerpt;');
    this.addSql('alter table delivery_attempts drop column error_class;');
    this.addSql('alter table delivery_attempts drop constraint delivery_attempts_pkey;');
    this.addSql('alter table delivery_attempts add primary key (delivery_id, attempt);');
    this.addSql('alter table delivery_attempts drop column series;');
    this.addSql('alter table webhook_deliveries drop column series;');
  }
}
