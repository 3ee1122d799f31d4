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
 * here, CONCURRENCY at a time, taken round by round across organizations (each one's
 * oldest first): one organization's burst of thousands does not queue another's start
 * behind it. A start that fails leaves its row pending, and the pending
 * sweep starts it (the sweep is the guarantee; this is the fast path). While Temporal is
 * known to be down (a start failed less than DOWN_FOR_MS ago), starts are not even tried:
 * the queue is handed to the sweep at once. Meanwhile `probe` asks every second whether
 * Temporal is back; when it is (or a start succeeds again), `onRecovered` has the sweep
 * start what was recorded meanwhile.
 */
export class WorkflowStarts {
  private readonly queue = new TakenInTurns<{ ref: DeliveryRef; meta: DeliveryMeta }>();
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
    if (this.isDown() || this.queue.size >= MAX_QUEUED) return;
    this.queue.add(ref.organizationId, { ref, meta });
    while (this.running < CONCURRENCY && this.queue.size > 0) void this.drain();
  }

  /** A start awaited by its caller (the pending sweep): remembers the outcome and tells whether Temporal answered. */
  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<StartOutcome> {
    try {
      const outcome = await this.startNow(ref, meta);
      this.remember(ref, meta);
      this.markUp();
      return outcome;
    } catch (error) {
      // Even a missed deadline may be an outage (a dead server's calls wait for a connection): ask.
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
    this.queue.clear();
    while (this.running > 0) await new Promise<void>((resolve) => this.settled.add(resolve));
  }

  private async drain(): Promise<void> {
    this.running++;
    try {
      for (let next = this.queue.take(); next; next = this.queue.take()) {
        try {
          await this.start(next.ref, next.meta);
        } catch (error) {
          // Unreachable: the rest would fail the same way, so the sweep gets them all. Slow (a
          // missed deadline on a busy server): only this one is left to the sweep.
          const unreachable = isUnreachable(error);
          this.options.logger?.warn({ err: error, deliveryId: next.ref.deliveryId, left: unreachable ? this.queue.size : 0 }, 'could not start a delivery workflow; the pending sweep starts it');
          if (unreachable) this.queue.clear();
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

/**
 * A queue per key, taken from in turns: each take gives the oldest item of the key whose turn
 * it is, then that key goes to the back of the line (Map keeps insertion order).
 */
export class TakenInTurns<T> {
  private readonly byKey = new Map<string, T[]>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  add(key: string, item: T): void {
    const items = this.byKey.get(key);
    if (items) items.push(item);
    else this.byKey.set(key, [item]);
    this.count++;
  }

  take(): T | undefined {
    const first = this.byKey.entries().next();
    if (first.done) return undefined;
    const [key, items] = first.value;
    const item = items.shift()!;
    this.byKey.delete(key);
    if (items.length > 0) this.byKey.set(key, items);
    this.count--;
    return item;
  }

  clear(): void {
    this.byKey.clear();
    this.count = 0;
  }
}

function keyOf(ref: DeliveryRef, series?: number): string {
  return `${ref.deliveryId}/${series ?? 1}`;
}

/**
 * Whether a start failed for want of Temporal rather than for its slowness: anything but a
 * missed deadline (gRPC DEADLINE_EXCEEDED anywhere in the error's causes, or a message that
 * says so) counts as unreachable.
 */
export function isUnreachable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if ((e as { code?: unknown }).code === 4 || /DEADLINE_EXCEEDED|deadline exceeded/i.test(String((e as { message?: unknown }).message ?? ''))) return false;
  }
  return true;
}
