import { Migration } from '@mikro-orm/migrations';

/**
 * An attempt counts once its request may have reached the receiver: `dispatched_at` is
 * set when the connection stands, just before the request is written. Attempts recorded
 * before this column existed were all sent, so they count as dispatched when they started.
 * `lease_owner` names the embedded-engine instance that holds a delivery, so only that
 * instance renews its lease.
 */
export class Migration20261124000000DeliveryAttemptDispatch extends Migration {
  override name = 'Migration20261124000000DeliveryAttemptDispatch';

  override up(): void {
    this.addSql('alter table delivery_attempts add column dispatched_at timestamptz;');
    this.addSql('update delivery_attempts set dispatched_at = started_at;');
    this.addSql('alter table webhook_deliveries add column lease_owner text;');
  }

  override down(): void {
    this.addSql('alter table webhook_deliveries drop column lease_owner;');
    this.addSql('alter table delivery_attempts drop column dispatched_at;');
  }
}
