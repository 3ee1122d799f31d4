import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type {
  GetWebhookDeliveryRequest,
  GetWebhookDeliveryResponse,
  GetWebhookRecoveryRequest,
  GetWebhookRecoveryResponse,
  ListWebhookDeliveriesRequest,
  ListWebhookDeliveriesResponse,
  RecoverWebhookDeliveriesRequest,
  RecoverWebhookDeliveriesResponse,
  ResendWebhookDeliveryRequest,
  ResendWebhookDeliveryResponse,
  WebhookDeliveryAttempt,
  WebhookRecovery,
  WebhookService,
} from '../gen/publishing/v1/webhook_service_pb';
import { auditedTransaction, noteAuditTarget } from '../audit';
import { requireCustomer } from '../auth';
import { DELIVERY_STATUSES, decodeCursor, encodeCursor, entityManagerOf, isUuid, pageSizeOf, type DeliveryStatus, type EntityManager } from '../db';
import type { AttemptView, DeliveryRecords, DeliveryView } from '../delivery';
import { apiError } from '../errors';
import { organizationEndpoint } from '../endpoints';
import { deliveryMessage, timestampOf } from '../webhooks';
import { deliveryNotFound, type DeliveryRecovery, type RecoveryAnswer, type RecoveryView } from './recovery';

/** The WebhookService routes this module serves; the endpoint routes are src/webhooks'. */
export type DeliveryLogMethods = 'listWebhookDeliveries' | 'getWebhookDelivery' | 'resendWebhookDelivery' | 'recoverWebhookDeliveries' | 'getWebhookRecovery';

/**
 * A customer's side of getting deliveries again: the delivery log, resends and recovery
 * jobs, always within the caller's organization (another organization's ids are not found).
 */
export class DeliveryLogServiceImpl implements Pick<ServiceImpl<typeof WebhookService>, DeliveryLogMethods> {
  constructor(private readonly deps: { records: DeliveryRecords; recovery: DeliveryRecovery }) {}

  async listWebhookDeliveries(req: ListWebhookDeliveriesRequest, ctx: HandlerContext): Promise<ListWebhookDeliveriesResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    const statuses = req.status.map((status) => {
      if (!(DELIVERY_STATUSES as readonly string[]).includes(status)) {
        throw apiError('DELIVERY_FILTER_INVALID', `Unknown status "${status.slice(0, 32)}"; one of ${DELIVERY_STATUSES.join(', ')}.`);
      }
      return status as DeliveryStatus;
    });
    const since = instantOf(req.since, 'since');
    const until = instantOf(req.until, 'until');
    if (since && until && since >= until) throw apiError('DELIVERY_FILTER_INVALID', 'since must be before until.');
    const endpoint = await organizationEndpoint(em, principal.organizationId, req.id);
    const rows = await this.deps.records.listForEndpoint(em, {
      organizationId: principal.organizationId,
      endpointId: endpoint.id,
      statuses,
      eventType: req.eventType || undefined,
      since,
      until,
      before: cursor ? { at: new Date(cursor.at), id: cursor.id } : undefined,
      limit: limit + 1,
    });
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      $typeName: 'publishing.v1.ListWebhookDeliveriesResponse',
      deliveries: page.map(deliveryMessage),
      nextPageToken: rows.length > limit && last ? encodeCursor({ at: new Date(last.createdAtMs).toISOString(), id: last.id }) : '',
    };
  }

  async getWebhookDelivery(req: GetWebhookDeliveryRequest, ctx: HandlerContext): Promise<GetWebhookDeliveryResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const endpoint = await organizationEndpoint(em, principal.organizationId, req.id);
    const view = await this.deliveryOf(em, principal.organizationId, endpoint.id, req.deliveryId);
    return {
      $typeName: 'publishing.v1.GetWebhookDeliveryResponse',
      delivery: deliveryMessage(view),
      series: view.series,
      attempts: view.attempts.map(attemptMessage),
      payload: view.payload,
    };
  }

  async resendWebhookDelivery(req: ResendWebhookDeliveryRequest, ctx: HandlerContext): Promise<ResendWebhookDeliveryResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.deliveryId.slice(0, 64), { endpointId: req.id.slice(0, 64) });
    const endpoint = await organizationEndpoint(em, principal.organizationId, req.id);
    if (!isUuid(req.deliveryId)) throw deliveryNotFound(req.deliveryId);
    const delivery = await this.deps.recovery.resend(em, { organizationId: principal.organizationId, endpoint, deliveryId: req.deliveryId }, (on, change) =>
      auditedTransaction(ctx, on, change),
    );
    return { $typeName: 'publishing.v1.ResendWebhookDeliveryResponse', delivery: deliveryMessage(delivery), series: delivery.series };
  }

  async recoverWebhookDeliveries(req: RecoverWebhookDeliveriesRequest, ctx: HandlerContext): Promise<RecoverWebhookDeliveriesResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const since = windowInstant(req.since, 'since');
    const until = windowInstant(req.until, 'until');
    noteAuditTarget(ctx, req.id.slice(0, 64), { since: since ? since.toISOString() : null, dryRun: req.dryRun });
    const endpoint = await organizationEndpoint(em, principal.organizationId, req.id);
    const answer = await this.deps.recovery.request(
      em,
      {
        organizationId: principal.organizationId,
        endpoint,
        since,
        until,
        dryRun: req.dryRun,
        requestedBy: `user:${principal.userId}`,
      },
      (on, change) => auditedTransaction(ctx, on, change),
    );
    return recoverAnswerMessage(answer);
  }

  async getWebhookRecovery(req: GetWebhookRecoveryRequest, ctx: HandlerContext): Promise<GetWebhookRecoveryResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const endpoint = await organizationEndpoint(em, principal.organizationId, req.id);
    const view = isUuid(req.jobId) ? await this.deps.recovery.find(em, { id: req.jobId, organizationId: principal.organizationId, endpointId: endpoint.id }) : null;
    if (!view) throw apiError('RECOVERY_NOT_FOUND', `No recovery ${req.jobId.slice(0, 64)} of this endpoint.`);
    return { $typeName: 'publishing.v1.GetWebhookRecoveryResponse', recovery: recoveryMessage(view) };
  }

  private async deliveryOf(em: EntityManager, organizationId: string, endpointId: string, deliveryId: string): Promise<DeliveryView> {
    const view = isUuid(deliveryId) ? await this.deps.records.lookup(em, { deliveryId }) : null;
    if (!view || view.organizationId !== organizationId || view.endpointId !== endpointId) throw deliveryNotFound(deliveryId);
    return view;
  }
}

const RFC_3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * An RFC 3339 filter bound, with its offset; anything else is DELIVERY_FILTER_INVALID, never
 * read another way (a date without an offset in the server's time zone, 02-31 as 03-03).
 */
function instantOf(value: string, name: string): Date | undefined {
  if (!value) return undefined;
  const refuse = () => apiError('DELIVERY_FILTER_INVALID', `${name} must be an RFC 3339 instant, as 2026-11-26T09:00:00Z.`);
  const parts = RFC_3339.exec(value);
  if (!parts) throw refuse();
  const [year, month, day, hour, minute, second] = parts.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const calendar = new Date(Date.UTC(year, month - 1, day, hour, minute, second));
  if (calendar.getUTCMonth() !== month - 1 || calendar.getUTCDate() !== day || calendar.getUTCHours() !== hour || calendar.getUTCMinutes() !== minute || calendar.getUTCSeconds() !== second) {
    throw refuse();
  }
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw refuse();
  return new Date(ms);
}

export function attemptMessage(a: AttemptView): WebhookDeliveryAttempt {
  const sentAt = a.dispatchedAt ?? a.startedAt;
  return {
    $typeName: 'publishing.v1.WebhookDeliveryAttempt',
    series: a.series,
    attempt: a.attempt,
    sentAt: timestampOf(sentAt.getTime()),
    durationMs: a.finishedAt ? BigInt(Math.max(0, a.finishedAt.getTime() - sentAt.getTime())) : 0n,
    responseStatus: a.responseStatus ?? 0,
    errorClass: a.errorClass ?? '',
    error: a.error ?? '',
    responseExcerpt: a.responseExcerpt ?? '',
    ...(a.retryAfterSeconds !== null && { retryAfterSeconds: a.retryAfterSeconds }),
  };
}

export function recoveryMessage(v: RecoveryView): WebhookRecovery {
  return {
    $typeName: 'publishing.v1.WebhookRecovery',
    id: v.id,
    endpointId: v.endpointId,
    since: timestampOf(v.sinceMs),
    until: timestampOf(v.untilMs),
    state: v.state,
    found: v.found,
    resent: v.resent,
    createdAt: timestampOf(v.createdAtMs),
    startedAt: v.startedAtMs === null ? undefined : timestampOf(v.startedAtMs),
    finishedAt: v.finishedAtMs === null ? undefined : timestampOf(v.finishedAtMs),
    stoppedReason: v.stoppedReason ?? '',
  };
}

export function recoverAnswerMessage(answer: RecoveryAnswer): RecoverWebhookDeliveriesResponse {
  return {
    $typeName: 'publishing.v1.RecoverWebhookDeliveriesResponse',
    recovery: answer.dryRun ? undefined : recoveryMessage(answer.recovery),
    found: answer.found,
    replayed: answer.dryRun ? false : answer.replayed,
    dryRun: answer.dryRun,
  };
}

/**
 * A window's (or filter's) bound as a date, refused with `code` when it is no time a date or
 * PostgreSQL can hold (a Timestamp's seconds may be anything a 64-bit integer holds): the
 * years 1 to 9999.
 */
export function windowInstant(timestamp: Timestamp | undefined, name: string, code: 'RECOVERY_WINDOW_INVALID' | 'INVALID_ARGUMENT' = 'RECOVERY_WINDOW_INVALID'): Date | undefined {
  if (!timestamp) return undefined;
  const date = timestampDate(timestamp);
  const year = date.getUTCFullYear();
  if (Number.isNaN(date.getTime()) || year < 1 || year > 9999) throw apiError(code, `${name} must be a time between the years 1 and 9999.`);
  return date;
}
