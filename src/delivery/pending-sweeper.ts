import type { MikroORM } from '../db/orm';
import type { Logger } from '../config/logger';
import type { DeliveryEngine } from './contract';

export interface PendingSweeperOptions {
  orm: MikroORM;
  engine: DeliveryEngine;
  logger: Logger;
  /** How often to look. */
  intervalMs: number;
  /** A delivery still pending after this long may never have had its workflow started. */
  olderThanMs: number;
  now?: () => number;
}

/**
 * With Temporal, a delivery row commits before its workflow starts; if the start then
 * fails (Temporal unreachable for a moment), the row would stay pending with nobody
 * working on it. This starts every delivery that is still pending after a while again.
 * Starting is idempotent (the workflow id is derived from endpoint and event), so a
 * delivery whose workflow exists is left as it is.
 */
export class PendingDeliverySweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly options: PendingSweeperOptions) {}

  begin(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep()
        .then(() => undefined)
        .catch((error: unknown) => this.options.logger.error({ err: error }, 'pending delivery sweep failed'))
        .finally(() => (this.running = null));
    }, this.options.intervalMs);
    this.timer.unref();
  }

  /** Starts the deliveries pending for longer than the threshold; returns how many. */
  async sweep(): Promise<number> {
    const cutoff = new Date((this.options.now ?? Date.now)() - this.options.olderThanMs);
    const rows = await this.options.orm.em.fork().execute<
      { id: string; organization_id: string; endpoint_id: string; event_id: string; event_type: string; url: string }[]
    >(
      `select d.id, d.organization_id, d.endpoint_id, d.event_id, d.event_type, e.url
         from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
        where d.status = 'pending' and d.created_at < ?
        order by d.created_at limit 500`,
      [cutoff],
    );
    for (const row of rows) {
      await this.options.engine.start(
        { deliveryId: row.id, organizationId: row.organization_id, endpointId: row.endpoint_id, eventId: row.event_id },
        { eventType: row.event_type, targetHost: new URL(row.url).host },
      );
    }
    return rows.length;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
