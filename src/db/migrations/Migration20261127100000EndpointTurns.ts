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
export class Migration20261127100000EndpointTurns extends Migration {
  override name = 'Migration20261127100000EndpointTurns';

  override up(): void {
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
  }
}
