import { setTimeout as delay } from 'node:timers/promises';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { Logger } from '../config';
import type {
  DeadLetterSchema,
  EventSchema,
  DeliveryAttemptSchema,
  KillSwitchSchema,
  MikroORM,
  OrganizationSchema,
  RecoveryJobSchema,
  WebhookDeliverySchema,
  WebhookEndpointSchema,
} from '../db';
import { rollUpStatistics, type DeliveryRecords } from '../delivery';
import { expireEventPayloads } from '../events';
import { deleteFinishedJobs } from '../recovery';
import { organizationRetention, youngestHorizons } from '../endpoints';
import { Poller } from '../poller';

/** The tables the sweep's statements read and write, each written by its owner's part. */
type SweepTables = InferKyselyDB<
  typeof WebhookDeliverySchema | typeof DeliveryAttemptSchema | typeof DeadLetterSchema | typeof KillSwitchSchema | typeof WebhookEndpointSchema
> &
  InferKyselyDB<typeof OrganizationSchema> &
  InferKyselyDB<typeof RecoveryJobSchema> &
  InferKyselyDB<typeof EventSchema>;

export interface RetentionSweepOptions {
  orm: MikroORM;
  records: DeliveryRecords;
  logger: Logger;
  now: () => number;
  /** Time from the end of one pass to the start of the next. */
  intervalMs: number;
  /** Rows one statement changes at most. */
  batchSize: number;
  /** Pause after each full batch, so that a long backlog leaves the database room between short transactions. */
  pauseMs: number;
}

/** What one pass removed. */
export interface SweepPass {
  /** Finished deliveries added to their endpoint's hourly statistics first, so that no figure loses what follows. */
  statisticsRolledUp: number;
  payloadsExpired: number;
  eventPayloadsExpired: number;
  attemptsDeleted: number;
  recoveryJobsDeleted: number;
  /** Statements run. */
  batches: number;
}

/**
 * Removes delivery data past its retention (src/endpoints/retention.ts), in the background of
 * every API instance: finished deliveries' payloads, published events' payloads, attempt
 * rows, finished recovery jobs.
 * Each batch is one statement, its own transaction, at most `batchSize` rows taken oldest
 * first along an index and locked with SKIP LOCKED; a batch that was full is followed by
 * the next after `pauseMs`, until one comes back short. Instances sweeping at once take
 * different rows. The rows' owners write the statements (DeliveryRecords, events,
 * recovery); this only paces them.
 */
export class RetentionSweep {
  private readonly loop: Poller;
  private running: Promise<SweepPass> | null = null;

  constructor(private readonly options: RetentionSweepOptions) {
    this.loop = new Poller({
      round: async () => {
        const pass = await this.sweep();
        if (pass.payloadsExpired + pass.eventPayloadsExpired + pass.attemptsDeleted + pass.recoveryJobsDeleted > 0) options.logger.info({ ...pass }, 'retention sweep');
      },
      intervalMs: options.intervalMs,
      onError: (error) => options.logger.warn({ err: error }, 'retention sweep failed; the next pass goes on'),
    });
  }

  /** A pass now, then one `intervalMs` after each pass ends, until stop(). */
  start(): void {
    this.loop.start();
  }

  /** No more passes; a pass running ends at its current batch, which is waited for. */
  async stop(): Promise<void> {
    await this.loop.stop();
    await this.running?.catch(() => undefined);
  }

  /** One whole pass now (a pass already running is waited for instead); what it removed. */
  async sweep(): Promise<SweepPass> {
    this.running ??= this.pass().finally(() => (this.running = null));
    return this.running;
  }

  private async pass(): Promise<SweepPass> {
    const { records, batchSize } = this.options;
    const pass: SweepPass = { statisticsRolledUp: 0, payloadsExpired: 0, eventPayloadsExpired: 0, attemptsDeleted: 0, recoveryJobsDeleted: 0, batches: 0 };
    const steps: [keyof Omit<SweepPass, 'batches'>, (now: Date) => Promise<number>][] = [
      // Attempts are deleted only once rolled up (deleteAttempts): roll up what the statistics pass has not reached yet.
      ['statisticsRolledUp', () => rollUpStatistics(this.options.orm.em.fork(), batchSize)],
      ['payloadsExpired', (now) => records.expirePayloads(this.retention(now), youngestHorizons(now).payloadBefore, batchSize)],
      [
        'eventPayloadsExpired',
        async (now) => Number((await expireEventPayloads(this.retention(now), youngestHorizons(now).payloadBefore, batchSize, now).executeTakeFirst()).numUpdatedRows),
      ],
      ['attemptsDeleted', (now) => records.deleteAttempts(this.retention(now), youngestHorizons(now).attemptsBefore, batchSize)],
      ['recoveryJobsDeleted', (now) => deleteFinishedJobs(this.retention(now), youngestHorizons(now).recoveryJobsBefore, batchSize)],
    ];
    for (const [counter, batch] of steps) {
      for (;;) {
        if (this.loop.signal.aborted) return pass;
        const removed = await batch(new Date(this.options.now()));
        pass[counter] += removed;
        pass.batches += 1;
        if (removed < batchSize) break;
        await delay(this.options.pauseMs, undefined, { signal: this.loop.signal }).catch(() => undefined);
      }
    }
    return pass;
  }

  /** A query creator over the organizations' horizons at `now`, on a connection of its own per statement. */
  private retention(now: Date) {
    return organizationRetention<SweepTables>(this.options.orm.em.fork().getKysely<SweepTables>(), now);
  }
}
