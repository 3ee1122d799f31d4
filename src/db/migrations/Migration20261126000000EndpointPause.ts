import { Migration } from '@mikro-orm/migrations';

/**
 * A customer may pause an endpoint: its deliveries are held, as a kill switch holds them,
 * until it is resumed. `paused_at` is when it was paused, null while it is not.
 */
export class Migration20261126000000EndpointPause extends Migration {
  override name = 'Migration20261126000000EndpointPause';

  override up(): void {
    this.addSql('alter table webhook_endpoints add column paused_at timestamptz;');
  }

  override down(): void {
    this.addSql('alter table webhook_endpoints drop column paused_at;');
  }
}
