import { ApplicationFailure } from '@temporalio/common';
import type { MikroORM } from '../db/orm';
import type { Logger } from '../config/logger';
import { FAILURE_TYPES, ATTEMPT_TIMEOUT_MS } from '../../workflows/policy';
import type { DeliveryActivities, DeliveryEngine, DeliveryMeta, DeliveryRef } from './contract';
import { workflowIdFor } from './workflow-id';

export interface EmbeddedEngineOptions {
  orm: MikroORM;
  activities: DeliveryActivities;
  logger: Logger;
  /** How often due deliveries are looked for when nothing wakes the engine. */
  pollIntervalMs: number;
  /** Deliveries worked on at once by this instance. */
  concurrency?: number;
  now?: () => number;
}

/**
 * The delivery engine used when no Temporal address is configured. It runs the same
 * activities with the same policy, driven by the delivery rows: a row is due when its
 * next attempt time has come, and an instance claims it with a lease taken under
 * `FOR UPDATE SKIP LOCKED`, so two instances never work on one delivery at once and a
 * restarted instance picks up whatever was pending or retrying.
 */
export class EmbeddedDeliveryEngine implements DeliveryEngine {
  private readonly concurrency: number;
  private readonly now: () => number;
  private readonly inFlight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private polling: Promise<void> | null = null;
  private wakeAgain = false;
  private backlog = false;

  constructor(private readonly options: EmbeddedEngineOptions) {
    this.concurrency = options.concurrency ?? 16;
    this.now = options.now ?? Date.now;
  }

  begin(): void {
    if (this.running) return;
    this.running = true;
    this.wake();
  }

  async start(ref: DeliveryRef, _meta: DeliveryMeta): Promise<{ workflowId: string }> {
    this.wake();
    return { workflowId: workflowIdFor(ref) };
  }

  /** Looks for due deliveries now rather than at the next poll. */
  wake(): void {
    if (!this.running) return;
    if (this.polling) {
      this.wakeAgain = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.polling = this.poll()
      .catch((error: unknown) => this.options.logger.error({ err: error }, 'delivery poll failed'))
      .finally(() => {
        this.polling = null;
        if (!this.running) return;
        if (this.wakeAgain) {
          this.wakeAgain = false;
          this.wake();
        } else {
          this.timer = setTimeout(() => this.wake(), this.options.pollIntervalMs);
          this.timer.unref();
        }
      });
  }

  async close(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    await this.polling;
    await Promise.allSettled([...this.inFlight]);
  }

  /** Seconds the oldest due delivery has been waiting (0 when none is due). */
  async lagSeconds(): Promise<number> {
    const [row] = await this.options.orm.em.fork().execute<{ due: Date | null }[]>(
      `select min(next_attempt_at) as due from webhook_deliveries
        where status in ('pending', 'retrying', 'held') and next_attempt_at <= ?`,
      [new Date(this.now())],
    );
    return row?.due ? Math.max(0, (this.now() - new Date(row.due).getTime()) / 1000) : 0;
  }

  private async poll(): Promise<void> {
    const free = this.concurrency - this.inFlight.size;
    if (free <= 0) return;
    const now = new Date(this.now());
    // The lease outlives one attempt, so a crashed instance's deliveries come back on their own.
    const leaseUntil = new Date(now.getTime() + ATTEMPT_TIMEOUT_MS * 2);
    const claimed = await this.options.orm.em.fork().execute<{ id: string; organization_id: string; endpoint_id: string; event_id: string }[]>(
      `update webhook_deliveries set lease_until = ?
        where id in (
          select id from webhook_deliveries
           where status in ('pending', 'retrying', 'held') and next_attempt_at <= ?
             and (lease_until is null or lease_until < ?)
           order by next_attempt_at
           limit ?
           for update skip locked)
        returning id, organization_id, endpoint_id, event_id`,
      [leaseUntil, now, now, free],
    );
    this.backlog = claimed.length === free;
    for (const row of claimed) {
      const ref: DeliveryRef = { deliveryId: row.id, organizationId: row.organization_id, endpointId: row.endpoint_id, eventId: row.event_id };
      const run = this.run(ref).finally(() => {
        this.inFlight.delete(run);
        // A poll that could not take everything due leaves work waiting: take it as soon as a slot frees.
        if (this.backlog) this.wake();
      });
      this.inFlight.add(run);
    }
  }

  /**
   * One step of the workflow: an attempt, then what the workflow would do with its outcome.
   * Every outcome the activity records also releases the lease. Anything that fails on the
   * way (the database gone mid-step, say) is logged and left to the lease: when it expires
   * the delivery is claimed again, so a step never ends in an unhandled rejection.
   */
  private async run(ref: DeliveryRef): Promise<void> {
    try {
      await this.step(ref);
    } catch (error) {
      this.options.logger.error({ err: error, deliveryId: ref.deliveryId }, 'delivery step failed; it is retried after its lease');
    }
  }

  private async step(ref: DeliveryRef): Promise<void> {
    try {
      await this.options.activities.attemptDelivery(ref);
    } catch (error) {
      const type = error instanceof ApplicationFailure ? error.type : null;
      if (type === FAILURE_TYPES.attemptsExhausted) await this.options.activities.deadLetter(ref);
      else if (type === FAILURE_TYPES.attemptFailed) await this.deadLetterIfExhausted(ref);
      else if (type !== FAILURE_TYPES.endpointGone) throw error;
    }
  }

  private async deadLetterIfExhausted(ref: DeliveryRef): Promise<void> {
    const [row] = await this.options.orm.em.fork().execute<{ next_attempt_at: Date | null }[]>(
      'select next_attempt_at from webhook_deliveries where id = ?',
      [ref.deliveryId],
    );
    if (row && row.next_attempt_at === null) await this.options.activities.deadLetter(ref);
  }
}
