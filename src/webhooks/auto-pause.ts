import { LockMode, type EntityManager, type MikroORM } from '../db';
import type { Logger } from '../config';
import { appendAuditEvent } from '../audit';
import { FAILING_PAUSE, type DeliveryEngine, type DeliveryRecords, type FailingEndpoint, type FailingThreshold } from '../delivery';
import type { EventPublisher } from '../events';
import { organizationEndpoint } from '../endpoints';
import { Poller } from '../poller';

export interface AutoPauseOptions extends FailingThreshold {
  /** How often to look for endpoints over the threshold, and for paused ones whose test delivery went through. */
  intervalMs: number;
}

export interface AutoPauseDeps {
  orm: MikroORM;
  deliveries: DeliveryRecords;
  engine: DeliveryEngine;
  events: Pick<EventPublisher, 'forChange'>;
  logger: Logger;
  now: () => number;
  options: AutoPauseOptions;
  /** Told of each automatic pause and lift, for the operator's metric. */
  onChange?: (change: 'paused' | 'lifted') => void;
}

/** The first look after a start reads the dead letters of this past day: one that came just before a restart still counts. */
const FIRST_LOOK_BACK_MS = 24 * 3600_000;
/** Each look reads a little before the last one: a dead letter committed while the last look ran is not missed. */
const LOOK_OVERLAP_MS = 60_000;

/**
 * Pauses an endpoint whose deliveries have all failed for a sustained period (its last
 * `deadLetters` deliveries since its last resume dead-lettered, the first of them at least
 * `failingForMs` ago; at once when the receiver answered 410 Gone to one of them), and lifts
 * that pause once a test delivery to it is delivered. A pause of the service holds the
 * endpoint's deliveries exactly as a customer's does (no attempt used; they go out on
 * resume), except that test deliveries still go out, so the customer can show the endpoint
 * is back.
 *
 * Each change is told once: the `webhook.endpoint.paused` (or `.resumed`) platform event to
 * the organization's other subscribed endpoints, with the reason and when failing began; the
 * reason on the endpoint (pauseReason, failingSince); an audit event; the operator's metric.
 * No flapping: a paused endpoint is not looked at again until it is resumed, and failures
 * before the resume no longer count.
 */
export class FailingEndpointPause {
  private readonly loop: Poller;
  private lookedAt: number | null = null;

  constructor(private readonly deps: AutoPauseDeps) {
    this.loop = new Poller({
      round: () => this.sweep(),
      intervalMs: deps.options.intervalMs,
      onError: (error) => deps.logger.warn({ err: error }, 'failing endpoint sweep failed'),
    });
  }

  /** Looks now, then every interval, until close(). */
  begin(): void {
    this.loop.start();
  }

  close(): Promise<void> {
    return this.loop.stop();
  }

  /** One look: pauses the endpoints over the threshold, lifts the pauses a test delivery answered. */
  async sweep(): Promise<void> {
    const now = this.deps.now();
    const since = new Date((this.lookedAt ?? now - FIRST_LOOK_BACK_MS) - LOOK_OVERLAP_MS);
    const em = this.deps.orm.em.fork();
    for (const failing of await this.deps.deliveries.failingEndpoints(em, since, this.deps.options)) await this.pause(failing);
    for (const recovered of await this.deps.deliveries.recoveredEndpoints(em)) await this.lift(recovered);
    this.lookedAt = now;
  }

  private async pause(failing: FailingEndpoint): Promise<void> {
    const events = this.deps.events.forChange();
    const paused = await this.deps.orm.em.fork().transactional(async (tx) => {
      const endpoint = await organizationEndpoint(tx, failing.organizationId, failing.endpointId, LockMode.PESSIMISTIC_WRITE);
      if (endpoint.disabledAt || endpoint.pausedAt) return false;
      const at = new Date(this.deps.now());
      endpoint.pausedAt = at;
      endpoint.pauseReason = FAILING_PAUSE;
      endpoint.failingSince = failing.failingSince;
      const reason = { reason: FAILING_PAUSE, failingSince: failing.failingSince.toISOString(), ...(failing.gone && { gone: true }) };
      await events.recordChange(tx, {
        organizationId: failing.organizationId,
        eventType: 'webhook.endpoint.paused',
        subjectId: endpoint.id,
        at,
        // Told to the organization's other endpoints: this one is failing, and paused it would only hold the event.
        exceptEndpointId: endpoint.id,
        payload: { endpointId: endpoint.id, url: endpoint.url, pausedAt: at.toISOString(), ...reason },
      });
      await this.audit(tx, failing.organizationId, endpoint.id, 'webhook.endpoint.auto_paused', reason);
      return true;
    });
    if (!paused) return;
    await events.committed();
    this.deps.onChange?.('paused');
    this.deps.logger.info({ endpointId: failing.endpointId, failingSince: failing.failingSince, gone: failing.gone }, 'endpoint paused: its deliveries kept failing');
  }

  private async lift(recovered: { endpointId: string; organizationId: string }): Promise<void> {
    const events = this.deps.events.forChange();
    const released = await this.deps.orm.em.fork().transactional(async (tx) => {
      const endpoint = await organizationEndpoint(tx, recovered.organizationId, recovered.endpointId, LockMode.PESSIMISTIC_WRITE);
      if (endpoint.pauseReason !== FAILING_PAUSE || !endpoint.pausedAt || endpoint.disabledAt) return null;
      const at = new Date(this.deps.now());
      endpoint.pausedAt = null;
      endpoint.pauseReason = null;
      endpoint.failingSince = null;
      endpoint.resumedAt = at;
      const released = await this.deps.deliveries.releaseHeldOfEndpoint(tx, recovered.organizationId, endpoint.id);
      await events.recordChange(tx, {
        organizationId: recovered.organizationId,
        eventType: 'webhook.endpoint.resumed',
        subjectId: endpoint.id,
        at,
        exceptEndpointId: endpoint.id,
        payload: { endpointId: endpoint.id, url: endpoint.url, resumedAt: at.toISOString(), reason: 'test_delivered' },
      });
      await this.audit(tx, recovered.organizationId, endpoint.id, 'webhook.endpoint.auto_resumed', { releasedDeliveries: released.length });
      return released;
    });
    if (released === null) return;
    await events.committed();
    this.deps.onChange?.('lifted');
    if (released.length > 0) {
      await this.deps.engine.release(released).catch((error: unknown) => {
        this.deps.logger.warn({ err: error, released: released.length }, 'could not wake every resumed delivery');
      });
    }
  }

  private async audit(tx: EntityManager, organizationId: string, endpointId: string, action: string, details: Record<string, unknown>): Promise<void> {
    await appendAuditEvent(tx, { organizationId, actorUserId: null, apiKeyId: null, action, targetId: endpointId, outcome: 'succeeded', reason: null, requestId: null, details });
  }
}
