import { create, type JsonObject } from '@bufbuild/protobuf';
import { timestampFromDate, timestampFromMs, type Timestamp } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import {
  AuditEventSchema,
  DeadLetterSchema,
  DeliveryAttemptSchema,
  DeliveryRecordSchema,
  KillSwitchSchema,
  EventRecordSchema,
  type GetDeliveryRequest,
  type GetEventRequest,
  type GetRecoveryRequest,
  type RecoverDeliveriesRequest,
  type ResendDeliveryRequest,
  type GetKillSwitchRequest,
  type ListDeadLettersRequest,
  type OperatorService,
  type QueryAuditEventsRequest,
  type SetDeliveryQuotaRequest,
  type SetKillSwitchRequest,
} from '../gen/publishing/operator/v1/operator_service_pb';
import { appendAuditEvent, queryAuditEvents } from '../audit';
import { setMonthlyDeliveryQuota } from '../auth';
import { OrganizationSchema, WebhookEndpointSchema, entityManagerOf, isUuid, pageSizeOf, decodeCursor, encodeCursor, type EntityManager } from '../db';
import { GLOBAL_SCOPE, type DeliveryEngine, type DeliveryRecords, type DeliveryView, type KillSwitchState, type ListedDelivery } from '../delivery';
import { recoverAnswerMessage, recoveryMessage, windowInstant, type AuditedChange, type DeliveryRecovery } from '../recovery';
import { organizationEndpoint } from '../endpoints';
import type { EventPublisher } from '../events';
import type { Logger } from '../config';
import { requestIdKey } from '../context';
import { apiError } from '../errors';

export interface OperatorServiceDeps {
  now: () => number;
  /** Owner of the delivery rows, dead letters and kill switches. */
  deliveries: DeliveryRecords;
  /** Told which held deliveries a switch released, so they go out at once. */
  engine: Pick<DeliveryEngine, 'release'>;
  /** Owner of the published events. */
  events: Pick<EventPublisher, 'find'>;
  /** Resends and recovery jobs, as customers ask for them. */
  recovery: DeliveryRecovery;
  logger: Logger;
}

/** Internal operations; the auth interceptor admits only the operator credential here. */
export class OperatorServiceImpl implements ServiceImpl<typeof OperatorService> {
  constructor(private readonly deps: OperatorServiceDeps) {}

  async getKillSwitch(req: GetKillSwitchRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const scope = await this.scopeOf(em, req.organizationId);
    return { killSwitch: killSwitchMessage(await this.deps.deliveries.readKillSwitch(em, scope)) };
  }

  async setKillSwitch(req: SetKillSwitchRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const reason = req.reason.trim();
    if (req.enabled && !reason) throw apiError('KILL_SWITCH_REASON_REQUIRED', 'Say why deliveries are stopped.');
    const scope = await this.scopeOf(em, req.organizationId);
    const { state, released } = await em.transactional(async (tx) => {
      const written = await this.deps.deliveries.writeKillSwitch(tx, scope, req.enabled, reason);
      await appendAuditEvent(tx, {
        organizationId: scope === GLOBAL_SCOPE ? null : scope,
        actorUserId: null,
        apiKeyId: null,
        action: req.enabled ? 'operator.kill_switch.on' : 'operator.kill_switch.off',
        targetId: scope,
        outcome: 'succeeded',
        reason: null,
        requestId: ctx.values.get(requestIdKey) || null,
        details: { reason },
      });
      return written;
    });
    // After the commit, outside the transaction: waking Temporal workflows goes over the network.
    if (released.length > 0) {
      await this.deps.engine.release(released).catch((error: unknown) => {
        // The rows are due already; a workflow not woken now sends when its interval ends.
        this.deps.logger.warn({ err: error, released: released.length }, 'could not wake every released delivery');
      });
    }
    return { killSwitch: killSwitchMessage(state) };
  }

  async queryAuditEvents(req: QueryAuditEventsRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    // The trail is read newest first by its row number; the token carries the last one read.
    const cursor = decodeCursor(req.pageToken, 'row number');
    if (req.organizationId && !isUuid(req.organizationId)) return { events: [], nextPageToken: '' };
    const rows = await queryAuditEvents(em, {
      organizationId: req.organizationId || undefined,
      action: req.action || undefined,
      since: dateOf(req.since, 'since'),
      until: dateOf(req.until, 'until'),
      beforeId: cursor?.id,
      limit: limit + 1,
    });
    const page = rows.slice(0, limit);
    return {
      events: page.map((row) =>
        create(AuditEventSchema, {
          id: row.id,
          occurredAt: timestampFromDate(new Date(row.occurred_at)),
          organizationId: row.organization_id ?? '',
          actorUserId: row.actor_user_id ?? '',
          apiKeyId: row.api_key_id ?? '',
          action: row.action,
          targetId: row.target_id ?? '',
          outcome: row.outcome,
          reason: row.reason ?? '',
          requestId: row.request_id ?? '',
          details: row.details as JsonObject,
        }),
      ),
      nextPageToken: rows.length > limit && page.length > 0 ? encodeCursor({ at: new Date(page.at(-1)!.occurred_at).toISOString(), id: page.at(-1)!.id }) : '',
    };
  }

  async listDeadLetters(req: ListDeadLettersRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    if ((req.organizationId && !isUuid(req.organizationId)) || (req.endpointId && !isUuid(req.endpointId))) {
      return { deadLetters: [], nextPageToken: '' };
    }
    const rows = await this.deps.deliveries.listDeadLetters(em, {
      organizationId: req.organizationId || undefined,
      endpointId: req.endpointId || undefined,
      since: dateOf(req.since, 'since'),
      until: dateOf(req.until, 'until'),
      before: cursor ? { at: new Date(cursor.at), deliveryId: cursor.id } : undefined,
      limit: limit + 1,
    });
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      deadLetters: page.map((row) =>
        create(DeadLetterSchema, {
          ...row,
          lastError: row.lastError ?? '',
          deadLetteredAt: timestampFromDate(row.deadLetteredAt),
        }),
      ),
      nextPageToken: rows.length > limit && last ? encodeCursor({ at: last.deadLetteredAt.toISOString(), id: last.deliveryId }) : '',
    };
  }

  async getDelivery(req: GetDeliveryRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const byId = req.deliveryId !== '';
    const byEvent = req.endpointId !== '' || req.eventId !== '';
    if (byId === byEvent || (byEvent && (!req.endpointId || !req.eventId))) {
      throw apiError('DELIVERY_LOOKUP_INVALID', 'Give deliveryId, or endpointId together with eventId.');
    }
    const notFound = () => apiError('DELIVERY_NOT_FOUND', 'No such delivery.');
    if (byId ? !isUuid(req.deliveryId) : !isUuid(req.endpointId)) throw notFound();
    const view = await this.deps.deliveries.lookup(em, byId ? { deliveryId: req.deliveryId } : { endpointId: req.endpointId, eventId: req.eventId });
    if (!view) throw notFound();
    return { delivery: deliveryRecordOf(view, view) };
  }

  async resendDelivery(req: ResendDeliveryRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const found = isUuid(req.deliveryId) ? await this.deps.deliveries.lookup(em, { deliveryId: req.deliveryId }) : null;
    if (!found) throw apiError('DELIVERY_NOT_FOUND', 'No such delivery.');
    const endpoint = await organizationEndpoint(em, found.organizationId, found.endpointId);
    await this.deps.recovery.resend(
      em,
      { organizationId: found.organizationId, endpoint, deliveryId: found.id },
      this.audited(ctx, { organizationId: found.organizationId, action: 'operator.delivery.resend', targetId: found.id, details: { endpointId: found.endpointId } }),
    );
    const view = (await this.deps.deliveries.lookup(em, { deliveryId: found.id }))!;
    return { delivery: deliveryRecordOf(view, view) };
  }

  async recoverDeliveries(req: RecoverDeliveriesRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const endpoint = isUuid(req.endpointId) ? await em.findOne(WebhookEndpointSchema, { id: req.endpointId }) : null;
    if (!endpoint) throw apiError('WEBHOOK_NOT_FOUND', `No webhook endpoint ${req.endpointId.slice(0, 64)}.`);
    const since = windowInstant(req.since, 'since');
    const until = windowInstant(req.until, 'until');
    const answer = await this.deps.recovery.request(
      em,
      { organizationId: endpoint.organizationId, endpoint, since, until, dryRun: req.dryRun, requestedBy: 'operator' },
      this.audited(ctx, {
        organizationId: endpoint.organizationId,
        action: 'operator.webhook.recover',
        targetId: endpoint.id,
        details: { since: since?.toISOString() ?? null, until: until?.toISOString() ?? null },
      }),
    );
    const message = recoverAnswerMessage(answer);
    return { recovery: message.recovery, found: message.found, replayed: message.replayed, dryRun: message.dryRun, organizationId: endpoint.organizationId };
  }

  async getRecovery(req: GetRecoveryRequest, ctx: HandlerContext) {
    const view = isUuid(req.jobId) ? await this.deps.recovery.find(entityManagerOf(ctx), { id: req.jobId }) : null;
    if (!view) throw apiError('RECOVERY_NOT_FOUND', `No recovery ${req.jobId.slice(0, 64)}.`);
    return { recovery: recoveryMessage(view), organizationId: view.organizationId };
  }

  /** A change in one transaction with its operator audit event. */
  private audited(ctx: HandlerContext, entry: { organizationId: string; action: string; targetId: string; details: Record<string, unknown> }): AuditedChange {
    return (em, change) =>
      em.transactional(async (tx) => {
        const changed = await change(tx);
        await appendAuditEvent(tx, {
          ...entry,
          actorUserId: null,
          apiKeyId: null,
          outcome: 'succeeded',
          reason: null,
          requestId: ctx.values.get(requestIdKey) || null,
        });
        return changed;
      });
  }

  async getEvent(req: GetEventRequest, ctx: HandlerContext) {
    const event = await this.deps.events.find(entityManagerOf(ctx), req.organizationId, req.eventId);
    if (!event) throw apiError('EVENT_NOT_FOUND', `No event ${req.eventId.slice(0, 128)} in organization ${req.organizationId.slice(0, 64)}.`);
    return {
      event: create(EventRecordSchema, {
        organizationId: event.organizationId,
        eventId: event.eventId,
        eventType: event.eventType,
        occurredAt: timestampFromDate(event.occurredAt),
        recordedAt: timestampFromDate(event.recordedAt),
        publisher: event.publisher,
        skippedReason: event.skippedReason ?? '',
      }),
      deliveries: event.deliveries.map((d) => deliveryRecordOf({ ...d, organizationId: event.organizationId }, null)),
    };
  }

  async setDeliveryQuota(req: SetDeliveryQuotaRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    if (req.monthlyDeliveries < 0n) throw apiError('INVALID_ARGUMENT', 'monthlyDeliveries must not be negative.');
    const organization = isUuid(req.organizationId) ? await em.findOne(OrganizationSchema, { id: req.organizationId }) : null;
    if (!organization) throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${req.organizationId.slice(0, 64)}.`);
    if (organization.plan !== 'enterprise') {
      throw apiError('NOT_ENTERPRISE', `Quotas are set per organization on the enterprise plan only; this one is on ${organization.plan}.`);
    }
    await setMonthlyDeliveryQuota(em, organization, Number(req.monthlyDeliveries));
    return { organizationId: organization.id, monthlyDeliveries: req.monthlyDeliveries };
  }

  private async scopeOf(em: EntityManager, organizationId: string): Promise<string> {
    if (!organizationId) return GLOBAL_SCOPE;
    const organization = isUuid(organizationId) ? await em.findOne(OrganizationSchema, { id: organizationId }) : null;
    if (!organization) throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${organizationId.slice(0, 64)}.`);
    return organization.id;
  }
}

/** A filter's bound: INVALID_ARGUMENT for a Timestamp no date or PostgreSQL can hold. */
function dateOf(timestamp: Timestamp | undefined, name: string): Date | undefined {
  return windowInstant(timestamp, name, 'INVALID_ARGUMENT');
}

function killSwitchMessage(state: KillSwitchState) {
  return create(KillSwitchSchema, {
    organizationId: state.scope === GLOBAL_SCOPE ? '' : state.scope,
    enabled: state.enabled,
    reason: state.reason,
    updatedAt: state.updatedAt ? timestampFromDate(state.updatedAt) : undefined,
  });
}

/**
 * A delivery as operators see it; with `lookup` (GetDelivery, a resend) every attempt of
 * every series and its dead-letter time, without (an event's deliveries) only the row.
 */
function deliveryRecordOf(view: ListedDelivery & { organizationId: string }, lookup: Pick<DeliveryView, 'attempts' | 'deadLetteredAt'> | null) {
  return create(DeliveryRecordSchema, {
    deliveryId: view.id,
    organizationId: view.organizationId,
    endpointId: view.endpointId,
    eventId: view.eventId,
    eventType: view.eventType,
    status: view.status,
    attemptCount: view.attemptCount,
    nextAttemptAt: view.nextAttemptAtMs === null ? undefined : timestampFromMs(view.nextAttemptAtMs),
    lastError: view.lastError ?? '',
    workflowId: view.workflowId,
    deadLettered: lookup ? lookup.deadLetteredAt !== null : view.status === 'dead_lettered',
    deadLetteredAt: lookup?.deadLetteredAt ? timestampFromDate(lookup.deadLetteredAt) : undefined,
    deliveredAt: view.deliveredAtMs === null ? undefined : timestampFromMs(view.deliveredAtMs),
    createdAt: timestampFromMs(view.createdAtMs),
    attempts: (lookup?.attempts ?? []).map((a) =>
      create(DeliveryAttemptSchema, {
        series: a.series,
        attempt: a.attempt,
        startedAt: timestampFromDate(a.startedAt),
        dispatchedAt: a.dispatchedAt ? timestampFromDate(a.dispatchedAt) : undefined,
        finishedAt: a.finishedAt ? timestampFromDate(a.finishedAt) : undefined,
        durationMs: a.finishedAt ? BigInt(a.finishedAt.getTime() - a.startedAt.getTime()) : 0n,
        httpStatus: a.responseStatus ?? 0,
        error: a.error ?? '',
        errorClass: a.errorClass ?? '',
        responseExcerpt: a.responseExcerpt ?? '',
      }),
    ),
  });
}
