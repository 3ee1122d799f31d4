import { randomUUID } from 'node:crypto';
import type { MikroORM } from '../db';
import type { Logger } from '../config';
import { Poller } from '../poller';
import { HEARTBEAT_TIMEOUT_MS } from '../../workflows/policy';
import type { DeliveryEngine, DeliveryMeta, DeliveryRef } from './contract';
import type { DeliveryAttempts } from './activities';
import type { AttemptStart } from './records';
import { workflowIdFor } from './workflow-id';

export interface EmbeddedEngineOptions {
  orm: MikroORM;
  attempts: DeliveryAttempts;
  logger: Logger;
  /** How often due deliveries are looked for when nothing wakes the engine. */
  pollIntervalMs: number;
  /** Deliveries worked on at once by this instance (DELIVERY_CONCURRENCY). */
  concurrency: number;
  /** How long close() waits for attempts in flight before it gives up on them. */
  closeGraceMs?: number;
}

/**
 * The delivery engine used when no Temporal address is configured. It runs the same
 * attempts with the same policy as the Temporal worker, driven by the delivery rows: a row
 * is due when its next attempt time has come, and an instance claims it with a lease taken
 * under `FOR UPDATE SKIP LOCKED`, so two instances never work on one delivery at once. The
 * lease is renewed with every heartbeat, as Temporal's heartbeat timeout would be; an
 * instance silent for HEARTBEAT_TIMEOUT_MS (it died) loses its deliveries to the others,
 * or to itself after a restart.
 *
 * What Temporal's retry policy does, the rows do here: a failed attempt is due again one
 * interval later; after the last one the delivery is dead-lettered.
 */
export class EmbeddedDeliveryEngine implements DeliveryEngine {
  /** Names this instance's leases. */
  private readonly owner = randomUUID();
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly stopping = new AbortController();
  private readonly loop: Poller;
  private backlog = false;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly options: EmbeddedEngineOptions) {
    this.loop = new Poller({
      round: () => this.poll(),
      intervalMs: options.pollIntervalMs,
      onError: (error) => options.logger.error({ err: error }, 'delivery poll failed'),
      afterRound: () => this.notifyIdle(),
    });
  }

  begin(): void {
    this.loop.start();
  }

  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<{ workflowId: string }> {
    this.wake();
    return { workflowId: workflowIdFor(ref, meta.series) };
  }

  /** The rows are due already; look for them now rather than at the next poll. */
  async release(): Promise<void> {
    this.wake();
  }

  /** Looks for due deliveries now rather than at the next poll. */
  wake(): void {
    this.loop.wake();
  }

  /**
   * Resolves once nothing is in flight and a poll found nothing more to claim: the explicit
   * signal tests wait on instead of sleeping.
   */
  idle(): Promise<void> {
    return new Promise((resolve) => {
      this.idleWaiters.push(resolve);
      this.notifyIdle();
    });
  }

  async close(): Promise<void> {
    await this.loop.stop();
    const grace = this.options.closeGraceMs ?? 10_000;
    const settled = Promise.allSettled([...this.inFlight.values()]);
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      settled.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), grace))),
    ]);
    clearTimeout(timer);
    if (late) {
      // Attempts still waiting on PostgreSQL: stop them; their leases lapse and another instance takes over.
      this.options.logger.warn({ deliveries: [...this.inFlight.keys()] }, 'delivery attempts still running at close; abandoning them');
      this.stopping.abort();
      await settled;
    }
  }

  private notifyIdle(): void {
    if (this.loop.busy || this.inFlight.size > 0 || this.backlog) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /**
   * With work waiting, a freed slot is refilled only once a quarter of the slots are free
   * (or none is busy): one claim then takes several deliveries, where a claim per freed slot
   * cost a round trip per delivery.
   */
  private get refillAt(): number {
    return Math.max(1, Math.ceil(this.options.concurrency / 4));
  }

  private async poll(): Promise<void> {
    const free = this.options.concurrency - this.inFlight.size;
    if (free <= 0) return;
    const claimed = await this.options.attempts.records.claimDue(this.options.orm.em.fork(), {
      owner: this.owner,
      limit: free,
      leaseMs: HEARTBEAT_TIMEOUT_MS,
      busy: [...this.inFlight.keys()],
    });
    this.backlog = claimed.length === free;
    for (const { ref, start } of claimed) {
      const run = this.run(ref, start).finally(() => {
        this.inFlight.delete(ref.deliveryId);
        // A poll that could not take everything due leaves work waiting: take it once enough slots are free.
        if (this.backlog && (this.options.concurrency - this.inFlight.size >= this.refillAt || this.inFlight.size === 0)) this.wake();
        this.notifyIdle();
      });
      this.inFlight.set(ref.deliveryId, run);
    }
  }

  /**
   * One step of the workflow: an attempt, then what the workflow does with its outcome.
   * Anything that fails on the way is logged and left to the lease: when it lapses the
   * delivery is claimed again, and nothing that was not sent has been counted.
   */
  private async run(ref: DeliveryRef, start: AttemptStart | null): Promise<void> {
    const { attempts, orm, logger } = this.options;
    const liveness = {
      signal: this.stopping.signal,
      heartbeat: () => {
        attempts.records.renewLease(orm.em.fork(), ref.deliveryId, this.owner, HEARTBEAT_TIMEOUT_MS).catch((error: unknown) => {
          logger.debug({ err: error, deliveryId: ref.deliveryId }, 'lease renewal failed');
        });
      },
    };
    try {
      const result = await attempts.run(ref, liveness, start ?? undefined);
      // Its endpoint had no turn free: the slot goes back now, and a claim takes the delivery when a turn frees.
      if (result.kind === 'turn') await attempts.records.giveBackLease(orm.em.fork(), ref.deliveryId, this.owner);
      if (result.kind === 'exhausted' || (result.kind === 'failed' && result.exhausted)) {
        await attempts.deadLetter(ref, this.stopping.signal);
      }
    } catch (error) {
      // Only a transient failure of ours reaches here (failureClass): a permanent one ended the delivery.
      logger.warn({ err: error, deliveryId: ref.deliveryId }, 'delivery step failed for a passing reason of ours; it is taken up again after its lease');
    }
  }
}
