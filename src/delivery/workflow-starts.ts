import type { Logger } from '../config';
import type { DeliveryMeta, DeliveryRef } from './contract';

/** Starts in flight at once: enough to keep up with a 100-event batch to many endpoints without flooding the frontend. */
const CONCURRENCY = 16;
/** Starts waiting their turn; beyond this a delivery is left to the pending sweep (its row is committed already). */
const MAX_QUEUED = 20_000;
/** After a start failed for want of Temporal, new starts are left to the sweep for this long instead of each waiting for a deadline. */
const DOWN_FOR_MS = 1_000;
/** While Temporal is down, how often to ask whether it is back. */
const PROBE_EVERY_MS = 1_000;
/** Deliveries remembered as having a workflow, so the sweep does not ask Temporal about them again. */
const REMEMBERED = 100_000;

export type StartOutcome = 'started' | 'existed';

/**
 * Workflow starts that follow a committed delivery without holding its caller: a publish,
 * a test delivery or a resend answers once its rows are committed, and the starts run
 * here, CONCURRENCY at a time. A start that fails leaves its row pending, and the pending
 * sweep starts it (the sweep is the guarantee; this is the fast path). While Temporal is
 * known to be down (a start failed less than DOWN_FOR_MS ago), starts are not even tried:
 * the queue is handed to the sweep at once. Meanwhile `probe` asks every second whether
 * Temporal is back; when it is (or a start succeeds again), `onRecovered` has the sweep
 * start what was recorded meanwhile.
 */
export class WorkflowStarts {
  private readonly queue: { ref: DeliveryRef; meta: DeliveryMeta }[] = [];
  private running = 0;
  private downUntil = 0;
  private down = false;
  private probing: NodeJS.Timeout | null = null;
  private readonly settled = new Set<() => void>();
  /** Delivery ids (with their series) whose workflow this process saw exist, oldest first. */
  private readonly known = new Set<string>();

  constructor(
    private readonly startNow: (ref: DeliveryRef, meta: DeliveryMeta) => Promise<StartOutcome>,
    private readonly options: { logger?: Logger; onRecovered?: () => void; probe?: () => Promise<boolean>; now?: () => number } = {},
  ) {}

  /** Queues a start; never waits for Temporal and never throws. */
  enqueue(ref: DeliveryRef, meta: DeliveryMeta): void {
    if (this.isDown() || this.queue.length >= MAX_QUEUED) return;
    this.queue.push({ ref, meta });
    while (this.running < CONCURRENCY && this.queue.length > 0) void this.drain();
  }

  /** A start awaited by its caller (the pending sweep): remembers the outcome and tells whether Temporal answered. */
  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<StartOutcome> {
    try {
      const outcome = await this.startNow(ref, meta);
      this.remember(ref, meta);
      this.markUp();
      return outcome;
    } catch (error) {
      this.markDown();
      throw error;
    }
  }

  /** Whether this process saw the workflow of this delivery's series exist. */
  has(ref: DeliveryRef, series?: number): boolean {
    return this.known.has(keyOf(ref, series));
  }

  /** Whether a start failed for want of Temporal within the last DOWN_FOR_MS. */
  isDown(): boolean {
    return (this.options.now ?? Date.now)() < this.downUntil;
  }

  /** Resolves once no start is in flight (queued ones are dropped: the sweep has them). */
  async close(): Promise<void> {
    if (this.probing) clearInterval(this.probing);
    this.probing = null;
    this.queue.length = 0;
    while (this.running > 0) await new Promise<void>((resolve) => this.settled.add(resolve));
  }

  private async drain(): Promise<void> {
    this.running++;
    try {
      for (let next = this.queue.shift(); next; next = this.queue.shift()) {
        try {
          await this.start(next.ref, next.meta);
        } catch (error) {
          this.options.logger?.warn({ err: error, deliveryId: next.ref.deliveryId, left: this.queue.length }, 'could not start delivery workflows; the pending sweep starts them');
          this.queue.length = 0;
        }
      }
    } finally {
      this.running--;
      for (const wake of this.settled) wake();
      this.settled.clear();
    }
  }

  private remember(ref: DeliveryRef, meta: DeliveryMeta): void {
    const key = keyOf(ref, meta.series);
    this.known.delete(key);
    this.known.add(key);
    if (this.known.size > REMEMBERED) this.known.delete(this.known.values().next().value!);
  }

  private markDown(): void {
    this.downUntil = (this.options.now ?? Date.now)() + DOWN_FOR_MS;
    this.down = true;
    const { probe } = this.options;
    if (!probe || this.probing) return;
    let asking = false;
    this.probing = setInterval(() => {
      if (asking) return;
      asking = true;
      void probe()
        .then((up) => up && this.markUp(), () => undefined)
        .finally(() => (asking = false));
    }, PROBE_EVERY_MS);
    this.probing.unref();
  }

  private markUp(): void {
    if (this.probing) clearInterval(this.probing);
    this.probing = null;
    if (!this.down) return;
    this.down = false;
    this.downUntil = 0;
    this.options.onRecovered?.();
  }
}

function keyOf(ref: DeliveryRef, series?: number): string {
  return `${ref.deliveryId}/${series ?? 1}`;
}
