import { Migration } from '@mikro-orm/migrations';

/**
 * An endpoint takes a bounded number of attempts in flight (its turns). Both counts of what
 * is in flight read the unfinished attempts, which this partial index keeps to the few
 * being made now however long the history grows.
 *
 * `delivery_endpoint_in_flight` is the one-delivery begin's count (a Temporal activity's):
 * concurrent begins for one endpoint each see only attempts committed before their
 * statement started, so they would all take the last turn. The count takes the endpoint's
 * transaction lock first, without waiting (null when another begin of the endpoint holds
 * it: that begin's attempt is not visible yet, so this one waits its turn), and, being
 * volatile, counts with a snapshot taken after the lock: the attempt of the begin that held
 * it before is committed and counted.
 */
/*
 * `retry_after_seconds`: what a receiver's 429 or 503 asked for in its Retry-After header,
 * kept with the attempt for the delivery log.
 *
 * An endpoint paused by the service because its deliveries kept failing says so
 * (`pause_reason` 'failing', and since when, `failing_since`); a customer's pause is
 * 'customer'. `resumed_at`: failures before the last resume no longer count towards the next
 * automatic pause. Answers 410 Gone are found through their own small index: they count
 * towards the pause at once.
 */
export class Migration20261127100000EndpointTurns extends Migration {
  override name = 'Migration20261127100000EndpointTurns';

  override up(): void {
    this.addSql('alter table delivery_attempts add column retry_after_seconds integer check (retry_after_seconds >= 0);');
    this.addSql("alter table webhook_endpoints add column pause_reason text check (pause_reason in ('customer', 'failing'));");
    this.addSql('alter table webhook_endpoints add column failing_since timestamptz;');
    this.addSql('alter table webhook_endpoints add column resumed_at timestamptz;');
    this.addSql("update webhook_endpoints set pause_reason = 'customer' where paused_at is not null;");
    this.addSql('create index delivery_attempts_gone_idx on delivery_attempts (finished_at) where response_status = 410;');
    this.addSql('create index dead_letters_created_idx on dead_letters (created_at);');
    this.addSql("create index webhook_endpoints_failing_idx on webhook_endpoints (paused_at) where pause_reason = 'failing';");
    this.addSql('create index delivery_attempts_unfinished_idx on delivery_attempts (delivery_id, started_at) where finished_at is null;');
    this.addSql(`
create function delivery_endpoint_in_flight(endpoint uuid, delivery uuid, since timestamptz) returns integer
language plpgsql volatile as $$
begin
  if not pg_try_advisory_xact_lock(hashtextextended('delivery_endpoint_in_flight:' || endpoint::text, 0)) then
    return null;
  end if;
  return (
    select count(*) from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id
     where a.finished_at is null and a.started_at > since and d.endpoint_id = endpoint and a.delivery_id <> delivery
  );
end $$;`);
  }

  override down(): void {
    this.addSql('drop function delivery_endpoint_in_flight(uuid, uuid, timestamptz);');
    this.addSql('drop index delivery_attempts_unfinished_idx;');
    this.addSql('alter table delivery_attempts drop column retry_after_seconds;');
    this.addSql('drop index webhook_endpoints_failing_idx;');
    this.addSql('drop index dead_letters_created_idx;');
    this.addSql('drop index delivery_attempts_gone_idx;');
    this.addSql('alter table webhook_endpoints drop column resumed_at;');
    this.addSql('alter table webhook_endpoints drop column failing_since;');
    this.addSql('alter table webhook_endpoints drop column pause_reason;');
  }
}
