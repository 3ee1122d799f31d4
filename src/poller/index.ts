/**
 * The one way a background loop runs (the pending-delivery sweep, recovery batches, the
 * embedded engine's claims): a round of work, then the next one an interval later, or at
 * once when something wakes the loop. One round at a time; a wake during a round is kept and
 * runs the next round as soon as this one ends, so nothing asked for is missed. A failed
 * round goes to `onError` and the loop goes on. Its timer never keeps the process alive.
 *
 * ```ts
 * const loop = new Poller({ round: () => this.sweep(), intervalMs: 30_000, onError: (err) => logger.warn({ err }, 'sweep failed') });
 * loop.start();      // first round now
 * loop.wake();       // a round now, or right after the one running
 * await loop.stop(); // no more rounds; resolves once the running one has ended
 * ```
 */
export interface PollerOptions {
  /** One round of the loop's work. */
  round: () => Promise<unknown>;
  /** The wait after a round before the next, unless the loop is woken sooner. */
  intervalMs: number;
  /** What a failed round threw; the next round comes as usual. */
  onError: (error: unknown) => void;
  /** Called after every round, once the next is arranged: where a loop tells those waiting for it to be idle. */
  afterRound?: () => void;
}

export class Poller {
  private timer: NodeJS.Timeout | null = null;
  private current: Promise<void> | null = null;
  private wokenDuringRound = false;
  private started = false;
  private stopping = new AbortController();

  constructor(private readonly options: PollerOptions) {}

  /** Runs the first round now; the loop then keeps going until stop(). A second start does nothing. */
  start(): void {
    if (this.started) return;
    this.started = true;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    this.wake();
  }

  /** Aborted when stop() is called: a round working in batches ends after the one it is on. A new one after start(). */
  get signal(): AbortSignal {
    return this.stopping.signal;
  }

  /** A round now, or right after the one running. Does nothing before start() or after stop(). */
  wake(): void {
    if (!this.started) return;
    if (this.current) {
      this.wokenDuringRound = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.current = this.options
      .round()
      .then(
        () => undefined,
        (error: unknown) => this.options.onError(error),
      )
      .finally(() => {
        this.current = null;
        if (this.started) {
          if (this.wokenDuringRound) {
            this.wokenDuringRound = false;
            this.wake();
          } else {
            this.timer = setTimeout(() => this.wake(), this.options.intervalMs);
            this.timer.unref();
          }
        }
        this.options.afterRound?.();
      });
  }

  /** True while a round runs or one is asked for at once. */
  get busy(): boolean {
    return this.current !== null || this.wokenDuringRound;
  }

  /** No more rounds; resolves once the round running (if any) has ended. */
  async stop(): Promise<void> {
    this.started = false;
    this.stopping.abort();
    this.wokenDuringRound = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.current;
  }
}
