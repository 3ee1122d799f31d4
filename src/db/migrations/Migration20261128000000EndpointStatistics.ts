import { Migration } from '@mikro-orm/migrations';

/**
 * Endpoint statistics read hourly roll-ups instead of every delivery of the period: one row
 * per endpoint and hour (of the deliveries' creation) with the finished deliveries by status,
 * their sent attempts, a histogram of response times and the hour's last failed attempt.
 *
 * A delivery is rolled up by a background pass once it has finished (src/delivery/statistics.ts):
 * `statistics_series` is the series it is rolled up with, `statistics_status` the status it was
 * counted in. Until the two series agree (an open delivery, a finished one the pass has not
 * reached yet, a resent one) a reader takes the delivery from its rows, along the partial
 * index that holds only those. Rows that exist when this runs are not rolled up here: the
 * pass catches up on them in batches, and meanwhile they are read from their rows.
 *
 * `response_ms_buckets` counts answered attempts by response time in 64 log-spaced buckets:
 * bucket b (1-based) holds times in (2^((b-2)/4), 2^((b-1)/4)] ms, the first everything up to 1 ms
 * and the last everything above 2^(62/4) ms (about 46 s).
 */
export class Migration20261128000000EndpointStatistics extends Migration {
  override name = 'Migration20261128000000EndpointStatistics';

  override up(): void {
    this.addSql('alter table webhook_deliveries add column statistics_series int;');
    this.addSql(`alter table webhook_deliveries add column statistics_status text check (statistics_status in ('delivered', 'dead_lettered', 'failed'));`);
    this.addSql('create index webhook_deliveries_unrolled_idx on webhook_deliveries (endpoint_id, created_at) where statistics_series is distinct from series;');
    this.addSql(`
create table endpoint_statistics_hours (
  endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
  hour timestamptz not null,
  delivered int not null default 0,
  dead_lettered int not null default 0,
  failed int not null default 0,
  attempts int not null default 0,
  response_ms_buckets int[] not null check (cardinality(response_ms_buckets) = 64),
  last_failure_at timestamptz,
  last_failure_delivery_id uuid,
  last_failure_status int,
  last_failure_error text,
  primary key (endpoint_id, hour)
);`);
  }

  override down(): void {
    this.addSql('drop table endpoint_statistics_hours;');
    this.addSql('drop index webhook_deliveries_unrolled_idx;');
    this.addSql('alter table webhook_deliveries drop column statistics_status;');
    this.addSql('alter table webhook_deliveries drop column statistics_series;');
  }
}
