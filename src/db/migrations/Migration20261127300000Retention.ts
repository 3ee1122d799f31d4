import { Migration } from '@mikro-orm/migrations';

/**
 * Delivery data is kept as long as the organization's plan says, then removed by the
 * retention sweep, or erased earlier on request. A delivery row outlives its payload: its
 * status, counts and ids stay for the audit and billing, and `payload_removed` says why the
 * body is gone ('expired' or 'erased'), so an answer can state it instead of failing. A
 * published event's payload (the deliveries' `data`) goes the same way.
 *
 * The sweep walks indexes, oldest first, in bounded batches: the partial indexes on the
 * deliveries and events that still hold a payload (removed rows leave it, so it covers only what the
 * sweep still has to look at), the attempts by start and the finished recovery jobs by end.
 * `if not exists`: on a large table an operator may build an index beforehand with
 * `create index concurrently` under the same name, and this migration then takes no lock
 * for it.
 */
export class Migration20261127300000Retention extends Migration {
  override name = 'Migration20261127300000Retention';

  override up(): void {
    this.addSql(`alter table webhook_deliveries add column payload_removed text check (payload_removed in ('expired', 'erased'));`);
    this.addSql('alter table webhook_deliveries add column payload_removed_at timestamptz;');
    this.addSql(
      `alter table webhook_deliveries add constraint webhook_deliveries_payload_removal_check
         check ((payload_removed is null) = (payload_removed_at is null) and (payload_removed is null or payload = ''));`,
    );
    this.addSql('create index if not exists webhook_deliveries_payload_kept_idx on webhook_deliveries (created_at, id) where payload_removed is null;');
    this.addSql('create index if not exists delivery_attempts_started_idx on delivery_attempts (started_at);');
    this.addSql(`alter table events add column payload_removed text check (payload_removed in ('expired', 'erased'));`);
    this.addSql('alter table events add column payload_removed_at timestamptz;');
    this.addSql(
      `alter table events add constraint events_payload_removal_check
         check ((payload_removed is null) = (payload_removed_at is null) and (payload_removed is null or payload = '{}'::jsonb));`,
    );
    this.addSql('create index if not exists events_payload_kept_idx on events (created_at, id) where payload_removed is null;');
    this.addSql(`create index if not exists recovery_jobs_finished_idx on recovery_jobs (finished_at) where state in ('finished', 'stopped');`);
  }

  override down(): void {
    this.addSql('drop index recovery_jobs_finished_idx;');
    this.addSql('drop index events_payload_kept_idx;');
    this.addSql('alter table events drop constraint events_payload_removal_check;');
    this.addSql('alter table events drop column payload_removed_at;');
    this.addSql('alter table events drop column payload_removed;');
    this.addSql('drop index delivery_attempts_started_idx;');
    this.addSql('drop index webhook_deliveries_payload_kept_idx;');
    this.addSql('alter table webhook_deliveries drop constraint webhook_deliveries_payload_removal_check;');
    this.addSql('alter table webhook_deliveries drop column payload_removed_at;');
    this.addSql('alter table webhook_deliveries drop column payload_removed;');
  }
}
