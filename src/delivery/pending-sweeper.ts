import type { MikroORM } from '../db';
import type { Logger } from '../config';
import { Poller } from '../poller';
import type { DeliveryEngine } from './contract';
import type { DeliveryRecords } from './records';

export interface PendingSweeperOptions {
  orm: MikroORM;
  records: DeliveryRecords;
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
 * fails (Temporal unreachable for a moment, or since the API started), the row would stay
 * pending with nobody working on it. This starts every delivery that is still pending after
 * a while again. Starting is idempotent (the workflow id is derived from endpoint and
 * event), so a delivery whose workflow exists is left as it is.
 */
export class PendingDeliverySweeper {
  private readonly loop: Poller;

  constructor(private readonly options: PendingSweeperOptions) {
    this.loop = new Poller({
      round: () => this.sweep(),
      intervalMs: options.intervalMs,
      onError: (error) => options.logger.warn({ err: error }, 'pending delivery sweep failed'),
    });
  }

  /** Sweeps now, then every interval, until close(). */
  begin(): void {
    this.loop.start();
  }

  /** Starts the deliveries pending for longer than the threshold; returns how many. */
  async sweep(): Promise<number> {
    const cutoff = new Date((this.options.now ?? Date.now)() - this.options.olderThanMs);
    const pending = await this.options.records.pendingSince(this.options.orm.em.fork(), cutoff, 500);
    for (const { eventType, url, series, ...ref } of pending) {
      await this.options.engine.start(ref, { eventType, targetHost: new URL(url).host, ...(series > 1 && { series }) });
    }
    return pending.length;
  }

  close(): Promise<void> {
    return this.loop.stop();
  }
}
