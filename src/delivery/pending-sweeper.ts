import type { MikroORM } from '../db';
import type { Logger } from '../config';
import { Poller } from '../poller';
import type { DeliveryMeta, DeliveryRef } from './contract';
import type { DeliveryRecords } from './records';

/** How the sweep starts a workflow: awaited, idempotent, and remembering which exist (TemporalDeliveryEngine). */
export interface SweptStarts {
  startAwaited(ref: DeliveryRef, meta: DeliveryMeta): Promise<'started' | 'existed'>;
  /** Whether this process already saw the workflow of this delivery's series exist. */
  hasWorkflow(ref: DeliveryRef, series?: number): boolean;
}

export interface PendingSweeperOptions {
  orm: MikroORM;
  records: DeliveryRecords;
  engine: SweptStarts;
  logger: Logger;
  /** How often to look. */
  intervalMs: number;
  /** A delivery still pending after this long may never have had its workflow started. */
  olderThanMs: number;
  now?: () => number;
}

/** Rows read per page of a pass. */
const PAGE = 500;
/** Starts in flight at once within a pass. */
const CONCURRENCY = 16;

/**
 * With Temporal, a delivery row commits before its workflow starts; if the start then
 * fails (Temporal unreachable for a moment, or since the API started, or the API died
 * before it started them), the row would stay pending with nobody working on it. This
 * starts every delivery that is still pending after a while again. Starting is idempotent
 * (the workflow id is derived from endpoint and event), so a delivery whose workflow exists
 * is left as it is.
 *
 * A pass reads every pending row past the threshold page by page (keyset, so rows whose
 * workflow already exists never fill a page and hide the rest) and starts them
 * CONCURRENCY at a time, skipping those this process already saw started; it stops at the
 * first start Temporal does not take, and the next pass begins again from the oldest.
 */
export class PendingDeliverySweeper {
  private readonly loop: Poller;
  /** The next pass is over every pending row, whatever its age. */
  private everyAge = false;

  constructor(private readonly options: PendingSweeperOptions) {
    this.loop = new Poller({
      round: () => {
        const everyAge = this.everyAge;
        this.everyAge = false;
        return this.sweep(everyAge ? 0 : undefined);
      },
      intervalMs: options.intervalMs,
      onError: (error) => options.logger.warn({ err: error }, 'pending delivery sweep failed'),
    });
  }

  /** Sweeps now (an API that restarts picks up what it left unstarted), then every interval, until close(). */
  begin(): void {
    this.loop.start();
  }

  /**
   * A pass now (or right after the one running), over every pending row whatever its age:
   * Temporal is back after an outage, and what was recorded meanwhile goes out at once (a
   * start that races the API's own is a no-op).
   */
  sweepAllNow(): void {
    this.everyAge = true;
    this.loop.wake();
  }

  /** Starts the deliveries pending for longer than the threshold; returns how many it started (or found started). */
  async sweep(olderThanMs = this.options.olderThanMs): Promise<number> {
    const cutoff = new Date((this.options.now ?? Date.now)() - olderThanMs);
    const { engine, records, orm } = this.options;
    let swept = 0;
    for (let page = await records.pendingSince(orm.em.fork(), cutoff, PAGE); page.length > 0; ) {
      const queue = page.filter((row) => !engine.hasWorkflow(row, row.series));
      const startNext = async (): Promise<void> => {
        for (let next = queue.shift(); next; next = queue.shift()) {
          const ref = { deliveryId: next.deliveryId, organizationId: next.organizationId, endpointId: next.endpointId, eventId: next.eventId };
          try {
            await engine.startAwaited(ref, { eventType: next.eventType, targetHost: new URL(next.url).host, ...(next.series > 1 && { series: next.series }) });
          } catch (error) {
            // Temporal did not take it: the rest of the pass would only wait for the same deadline.
            queue.length = 0;
            throw error;
          }
          swept++;
        }
      };
      await Promise.all(Array.from({ length: Math.min(CONCURRENCY, queue.length) }, startNext));
      if (page.length < PAGE) break;
      const last = page.at(-1)!;
      page = await records.pendingSince(orm.em.fork(), cutoff, PAGE, { createdAt: last.createdAt, deliveryId: last.deliveryId });
    }
    return swept;
  }

  close(): Promise<void> {
    return this.loop.stop();
  }
}
