import { Migration } from '@mikro-orm/migrations';

/**
 * Events published by internal services. The unique (organization_id, event_id) makes a
 * producer's retry find its first publish, whatever runs concurrently. Deliveries of an
 * event are found by (organization_id, event_id): a replayed publish and the operator
 * lookup read them without walking an organization's whole history.
 */
export class Migration20261124200000Events extends Migration {
  override name = 'Migration20261124200000Events';

  override up(): void {
    this.addSql(`
create table events (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  event_id text not null check (length(event_id) between 1 and 128),
  event_type text not null,
  payload jsonb not null,
  occurred_at timestamptz not null,
  publisher text not null,
  skipped_reason text,
  created_at timestamptz not null,
  constraint events_organization_event_unique unique (organization_id, event_id)
);`);
    this.addSql('create index webhook_deliveries_event_idx on webhook_deliveries (organization_id, event_id);');
  }

  override down(): void {
    this.addSql('drop index webhook_deliveries_event_idx;');
    this.addSql('drop table events;');
  }
}
