import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { ConnectError } from '@connectrpc/connect';
import type { Logger } from '../config';
import { epochMs, OrganizationSchema, type EntityManager, type MikroORM, type RecoveryJobSchema, type RecoveryState, type WebhookEndpoint } from '../db';
import { RECOVERABLE_STATUSES, type DeliveryEngine, type DeliveryRecords, type ListedDelivery } from '../delivery';
import { changeEventId, type EventPublisher } from '../events';
import { apiError, errorInfoOf } from '../errors';
import { organizationEndpoint, planIncludesDeliveries, takeDeliveryQuota } from '../endpoints';
import { Poller } from '../poller';

type Tables = InferKyselyDB<typeof RecoveryJobSchema>;
const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

/** The longest window a recovery may cover: a customer outage, not a replay of the history. */
export const MAX_RECOVERY_WINDOW_MS = 14 * 24 * 60 * 60 * 1000;
/** The pace of a recovery: at most this many resends of one job per batch... */
export const RECOVERY_BATCH_SIZE = 10;
/** ...and one batch per this interval, across every instance (next_batch_at), so a recovered endpoint is not flooded. */
export const RECOVERY_BATCH_INTERVAL_MS = 1_000;
/** The platform event a finished (or stopped) recovery sends to the organization's subscribed endpoints. */
export const RECOVERY_FINISHED_EVENT = 'webhook.recovery.finished';

/** A recovery job as the API shows it, timestamps as epoch milliseconds. */
export interface RecoveryView {
  id: string;
  organizationId: string;
  endpointId: string;
  sinceMs: number;
  untilMs: number;
  state: RecoveryState;
  found: number;
  resent: number;
  stoppedReason: string | null;
  createdAtMs: number;
  startedAtMs: number | null;
  finishedAtMs: number | null;
}

/** Runs a change in one transaction with the caller's success audit event (customer or operator). */
export type AuditedChange = <T>(em: EntityManager, change: (tx: EntityManager) => Promise<T>) => Promise<T>;

export interface RecoveryRequest {
  organizationId: string;
  endpoint: WebhookEndpoint;
  since: Date | undefined;
  until: Date | undefined;
  dryRun: boolean;
  /** `user:<id>` or `operator`. */
  requestedBy: string;
}

export type RecoveryAnswer = { dryRun: true; found: number } | { dryRun: false; found: number; recovery: RecoveryView; replayed: boolean };

export interface DeliveryRecoveryDeps {
  orm: MikroORM;
  records: DeliveryRecords;
  engine: Pick<DeliveryEngine, 'start'>;
  publisher: Pick<EventPublisher, 'forChange'>;
  logger: Logger;
  now: () => number;
}

/**
 * Getting deliveries again after an outage, for customers and operators alike: a resend
 * starts a new series of attempts on one delivery; a recovery job resends every
 * dead-lettered or failed delivery of an endpoint in a window, paced, in the background.
 * Owner of the recovery_jobs table. Quotas and plans apply to each resend as to any
 * delivery (src/endpoints/plans.ts).
 */
export class DeliveryRecovery {
  /** The pace lives in the rows (next_batch_at): a round at once finds only the batches that are due. */
  private readonly loop: Poller;

  constructor(private readonly deps: DeliveryRecoveryDeps) {
    this.loop = new Poller({
      round: () => this.runDue(),
      intervalMs: RECOVERY_BATCH_INTERVAL_MS,
      onError: (error) => deps.logger.error({ err: error }, 'recovery batch failed'),
    });
  }

  /**
   * Resends one delivery of an endpoint that is not disabled (a paused one holds it): a new
   * series on the same delivery, pending now, counted against the month's quota, in one
   * transaction with its audit event.
   */
  async resend(
    em: EntityManager,
    target: { organizationId: string; endpoint: WebhookEndpoint; deliveryId: string },
    audited: AuditedChange,
  ): Promise<ListedDelivery> {
    const { organizationId, endpoint, deliveryId } = target;
    if (endpoint.disabledAt) throw apiError('WEBHOOK_DISABLED', 'This endpoint is disabled; nothing is sent to it.');
    const now = new Date(this.deps.now());
    const delivery = await audited(em, async (tx) => {
      const result = await this.deps.records.resend(tx, { deliveryId, organizationId, endpointId: endpoint.id });
      if (!result) throw deliveryNotFound(deliveryId);
      if ('refused' in result) {
        throw apiError('DELIVERY_NOT_RESENDABLE', `The delivery is ${result.refused}; only a delivered, failed or dead-lettered delivery is resent.`, {
          metadata: { status: result.refused },
        });
      }
      const organization = await tx.findOneOrFail(OrganizationSchema, { id: organizationId });
      await takeDeliveryQuota(tx, organization, now);
      return result.resent;
    });
    await this.start(delivery, organizationId, endpoint);
    return delivery;
  }

  /**
   * Asks for the recovery of an endpoint's window: counts what it would resend, or records
   * the job (the same window again answers with its first job) for the runner to work on.
   */
  async request(em: EntityManager, request: RecoveryRequest, audited: AuditedChange): Promise<RecoveryAnswer> {
    const { organizationId, endpoint } = request;
    const now = this.deps.now();
    if (!request.since) throw apiError('RECOVERY_WINDOW_INVALID', 'since is required: when the outage began.');
    const since = request.since;
    const until = request.until ?? new Date(now);
    if (since.getTime() >= until.getTime()) throw apiError('RECOVERY_WINDOW_INVALID', 'since must be before until (or before now, without until).');
    if (until.getTime() - since.getTime() > MAX_RECOVERY_WINDOW_MS) {
      throw apiError('RECOVERY_WINDOW_TOO_LONG', 'A recovery covers at most 14 days; ask for several windows.', { metadata: { maxDays: '14' } });
    }
    if (endpoint.disabledAt) throw apiError('WEBHOOK_DISABLED', 'This endpoint is disabled; nothing is sent to it.');
    const organization = await em.findOneOrFail(OrganizationSchema, { id: organizationId });
    if (!planIncludesDeliveries(organization)) {
      throw apiError('PLAN_EXCLUDES_WEBHOOKS', `The ${organization.plan} plan does not include webhook deliveries.`, { metadata: { plan: organization.plan } });
    }
    const window = { organizationId, endpointId: endpoint.id, since, until };
    // A dry run writes nothing but its audit event: who looked, at which window.
    if (request.dryRun) return { dryRun: true, found: await audited(em, (tx) => this.deps.records.countInWindow(tx, window, RECOVERABLE_STATUSES)) };
    const found = await this.deps.records.countInWindow(em, window, RECOVERABLE_STATUSES);

    const at = new Date(now);
    const answer = await audited(em, async (tx) => {
      const inserted = await db(tx)
        .insertInto('recovery_jobs')
        .values({
          id: randomUUID(),
          organization_id: organizationId,
          endpoint_id: endpoint.id,
          since,
          until,
          requested_until: request.until ?? null,
          state: 'queued',
          found,
          resent: 0,
          next_batch_at: at,
          requested_by: request.requestedBy,
          created_at: at,
          updated_at: at,
        })
        .onConflict((oc) => oc.constraint('recovery_jobs_window_unique').doNothing())
        .returning('id')
        .executeTakeFirst();
      const id =
        inserted?.id ??
        (
          await db(tx)
            .selectFrom('recovery_jobs')
            .select('id')
            .where('endpoint_id', '=', endpoint.id)
            .where('since', '=', since)
            .where((eb) => (request.until ? eb('requested_until', '=', request.until) : eb('requested_until', 'is', null)))
            .executeTakeFirstOrThrow()
        ).id;
      return { recovery: (await this.find(tx, { id, organizationId }))!, replayed: !inserted };
    });
    if (!answer.replayed) this.wake();
    return { dryRun: false, found: answer.replayed ? answer.recovery.found : found, ...answer };
  }

  /** A recovery job, within an organization (and endpoint) when given; null when there is none. */
  async find(em: EntityManager, which: { id: string; organizationId?: string; endpointId?: string }): Promise<RecoveryView | null> {
    let q = db(em)
      .selectFrom('recovery_jobs')
      .select([
        'id',
        'organization_id as organizationId',
        'endpoint_id as endpointId',
        epochMs('since').as('sinceMs'),
        epochMs('until').as('untilMs'),
        'state',
        'found',
        'resent',
        'stopped_reason as stoppedReason',
        epochMs('created_at').as('createdAtMs'),
        epochMs<number | null>('started_at').as('startedAtMs'),
        epochMs<number | null>('finished_at').as('finishedAtMs'),
      ])
      .where('id', '=', which.id);
    if (which.organizationId) q = q.where('organization_id', '=', which.organizationId);
    if (which.endpointId) q = q.where('endpoint_id', '=', which.endpointId);
    return (await q.executeTakeFirst()) ?? null;
  }

  /** Works on the open jobs: those of a previous process at once, new ones when woken. */
  begin(): void {
    this.loop.start();
  }

  /** Looks for due batches now rather than at the next interval. */
  wake(): void {
    this.loop.wake();
  }

  close(): Promise<void> {
    return this.loop.stop();
  }

  /** One batch of every job that is due. */
  private async runDue(): Promise<void> {
    const em = this.deps.orm.em.fork();
    const due = await db(em)
      .selectFrom('recovery_jobs')
      .select('id')
      .where('state', 'in', ['queued', 'running'])
      .where('next_batch_at', '<=', new Date(this.deps.now()))
      .orderBy('next_batch_at')
      .limit(16)
      .execute();
    for (const { id } of due) await this.batch(id);
  }

  /**
   * One paced batch of a job, in one transaction under the job's row lock (another instance
   * skips it meanwhile): the next deliveries of the window after the job's cursor are resent,
   * each with its quota unit, and the cursor moves past them; so a restart resends nothing
   * twice and misses nothing. The batch that finds the window exhausted finishes the job and
   * records its platform event in the same transaction.
   */
  private async batch(jobId: string): Promise<void> {
    const events = this.deps.publisher.forChange();
    const started: { delivery: ListedDelivery; job: { organizationId: string; endpoint: WebhookEndpoint } }[] = [];
    await this.deps.orm.em.fork().transactional(async (tx) => {
      const now = new Date(this.deps.now());
      const job = await db(tx)
        .selectFrom('recovery_jobs')
        .selectAll()
        .where('id', '=', jobId)
        .where('state', 'in', ['queued', 'running'])
        .where('next_batch_at', '<=', now)
        .forUpdate()
        .skipLocked()
        .executeTakeFirst();
      if (!job) return;
      const endpoint = await organizationEndpoint(tx, job.organization_id, job.endpoint_id);
      const organization = await tx.findOneOrFail(OrganizationSchema, { id: job.organization_id });
      const window = { organizationId: job.organization_id, endpointId: job.endpoint_id, since: new Date(job.since), until: new Date(job.until) };
      const after = job.after_id && job.after_created_at ? { at: new Date(job.after_created_at), id: job.after_id } : null;
      const next = endpoint.disabledAt ? [] : await this.deps.records.nextInWindow(tx, window, RECOVERABLE_STATUSES, after, RECOVERY_BATCH_SIZE);
      let stoppedReason: string | null = endpoint.disabledAt ? 'WEBHOOK_DISABLED' : null;
      let last = after;
      for (const candidate of next) {
        try {
          // A savepoint per delivery: a quota refused rolls back its resend alone.
          const resent = await tx.transactional(async (one) => {
            const result = await this.deps.records.resend(one, { deliveryId: candidate.id, organizationId: job.organization_id }, RECOVERABLE_STATUSES);
            if (!result || !('resent' in result)) return null;
            await takeDeliveryQuota(one, organization, now);
            return result.resent;
          });
          if (resent) started.push({ delivery: resent, job: { organizationId: job.organization_id, endpoint } });
        } catch (error) {
          const code = error instanceof ConnectError ? errorInfoOf(error)?.code : undefined;
          if (code !== 'DELIVERY_QUOTA_EXCEEDED' && code !== 'PLAN_EXCLUDES_WEBHOOKS') throw error;
          stoppedReason = code;
          break;
        }
        last = { at: new Date(candidate.createdAtMs), id: candidate.id };
      }
      const done = stoppedReason !== null || next.length < RECOVERY_BATCH_SIZE;
      const state: RecoveryState = stoppedReason ? 'stopped' : done ? 'finished' : 'running';
      const resent = job.resent + started.length;
      await db(tx)
        .updateTable('recovery_jobs')
        .set({
          state,
          resent,
          stopped_reason: stoppedReason,
          after_created_at: last?.at ?? null,
          after_id: last?.id ?? null,
          started_at: job.started_at ?? now,
          finished_at: done ? now : null,
          next_batch_at: new Date(now.getTime() + RECOVERY_BATCH_INTERVAL_MS),
          updated_at: now,
        })
        .where('id', '=', job.id)
        .execute();
      if (done) {
        await events.record(tx, [
          {
            organizationId: job.organization_id,
            eventId: changeEventId(RECOVERY_FINISHED_EVENT, job.id, now),
            eventType: RECOVERY_FINISHED_EVENT,
            occurredAt: now,
            payload: {
              recoveryId: job.id,
              endpointId: job.endpoint_id,
              state,
              since: new Date(job.since).toISOString(),
              until: new Date(job.until).toISOString(),
              found: job.found,
              resent,
              stoppedReason,
              finishedAt: now.toISOString(),
            },
          },
        ]);
      }
    });
    // After the commit: Temporal is over the network, and a rolled-back resend must not start.
    for (const { delivery, job } of started) await this.start(delivery, job.organizationId, job.endpoint);
    await events.committed();
  }

  /** Starts a resent delivery's new series; when the engine does not answer, the pending sweep starts it. */
  private async start(delivery: ListedDelivery, organizationId: string, endpoint: WebhookEndpoint): Promise<void> {
    const ref = { deliveryId: delivery.id, organizationId, endpointId: endpoint.id, eventId: delivery.eventId };
    try {
      await this.deps.engine.start(ref, { eventType: delivery.eventType, targetHost: new URL(endpoint.url).host, series: delivery.series });
    } catch (error) {
      this.deps.logger.warn({ err: error, deliveryId: delivery.id }, 'could not start a resent delivery; the pending sweep retries it');
    }
  }
}

export function deliveryNotFound(id: string): ConnectError {
  return apiError('DELIVERY_NOT_FOUND', `No delivery ${id.slice(0, 64)} of this endpoint.`);
}
