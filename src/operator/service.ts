import { create, type JsonObject } from '@bufbuild/protobuf';
import { timestampDate, timestampFromDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import {
  AuditEventSchema,
  DeadLetterSchema,
  KillSwitchSchema,
  type GetKillSwitchRequest,
  type ListDeadLettersRequest,
  type OperatorService,
  type QueryAuditEventsRequest,
  type SetDeliveryQuotaRequest,
  type SetKillSwitchRequest,
} from '../gen/publishing/operator/v1/operator_service_pb';
import { appendAuditEvent, queryAuditEvents } from '../audit';
import { OrganizationSchema, entityManagerOf, isUuid, pageSizeOf, decodeCursor, encodeCursor, type EntityManager } from '../db';
import { GLOBAL_SCOPE, readKillSwitch, writeKillSwitch, type KillSwitchState } from '../delivery';
import { requestIdKey } from '../context';
import { apiError } from '../errors';

export interface OperatorServiceDeps {
  now: () => number;
  /** Told when a switch goes off, so held deliveries go out at once. */
  onDeliveriesReleased: () => void;
}

/** Internal operations; the auth interceptor admits only the operator credential here. */
export class OperatorServiceImpl implements ServiceImpl<typeof OperatorService> {
  constructor(private readonly deps: OperatorServiceDeps) {}

  async getKillSwitch(req: GetKillSwitchRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const scope = await this.scopeOf(em, req.organizationId);
    return { killSwitch: killSwitchMessage(await readKillSwitch(em, scope)) };
  }

  async setKillSwitch(req: SetKillSwitchRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const reason = req.reason.trim();
    if (req.enabled && !reason) throw apiError('KILL_SWITCH_REASON_REQUIRED', 'Say why deliveries are stopped.');
    const scope = await this.scopeOf(em, req.organizationId);
    const state = await em.transactional(async (tx) => {
      const written = await writeKillSwitch(tx, scope, req.enabled, reason, new Date(this.deps.now()));
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
    if (!req.enabled) this.deps.onDeliveriesReleased();
    return { killSwitch: killSwitchMessage(state) };
  }

  async queryAuditEvents(req: QueryAuditEventsRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    if (req.pageToken && !/^\d{1,19}$/.test(req.pageToken)) throw apiError('PAGE_TOKEN_INVALID', 'pageToken is not a token this service issued.');
    if (req.organizationId && !isUuid(req.organizationId)) return { events: [], nextPageToken: '' };
    const rows = await queryAuditEvents(em, {
      organizationId: req.organizationId || undefined,
      action: req.action || undefined,
      since: dateOf(req.since),
      until: dateOf(req.until),
      beforeId: req.pageToken || undefined,
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
      nextPageToken: rows.length > limit ? (page.at(-1)?.id ?? '') : '',
    };
  }

  async listDeadLetters(req: ListDeadLettersRequest, ctx: HandlerContext) {
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    if ((req.organizationId && !isUuid(req.organizationId)) || (req.endpointId && !isUuid(req.endpointId))) {
      return { deadLetters: [], nextPageToken: '' };
    }
    const where: string[] = [];
    const params: unknown[] = [];
    const filter = (clause: string, ...values: unknown[]) => {
      where.push(clause);
      params.push(...values);
    };
    if (req.organizationId) filter('l.organization_id = ?', req.organizationId);
    if (req.endpointId) filter('l.endpoint_id = ?', req.endpointId);
    if (req.since) filter('l.created_at >= ?', timestampDate(req.since));
    if (req.until) filter('l.created_at < ?', timestampDate(req.until));
    if (cursor) filter('(l.created_at, l.delivery_id) < (?, ?)', new Date(cursor.at), cursor.id);
    const rows = await em.execute<DeadLetterRow[]>(
      `select l.delivery_id, l.organization_id, l.endpoint_id, l.created_at, d.event_id, d.event_type, d.attempt_count, d.last_error, d.workflow_id
         from dead_letters l join webhook_deliveries d on d.id = l.delivery_id
        ${where.length ? `where ${where.join(' and ')}` : ''}
        order by l.created_at desc, l.delivery_id desc limit ?`,
      [...params, limit + 1],
    );
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      deadLetters: page.map((row) =>
        create(DeadLetterSchema, {
          deliveryId: row.delivery_id,
          organizationId: row.organization_id,
          endpointId: row.endpoint_id,
          eventId: row.event_id,
          eventType: row.event_type,
          attemptCount: row.attempt_count,
          lastError: row.last_error ?? '',
          deadLetteredAt: timestampFromDate(new Date(row.created_at)),
          workflowId: row.workflow_id,
        }),
      ),
      nextPageToken: rows.length > limit && last ? encodeCursor({ at: new Date(last.created_at).toISOString(), id: last.delivery_id }) : '',
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
    organization.monthlyDeliveryQuota = Number(req.monthlyDeliveries);
    await em.flush();
    return { organizationId: organization.id, monthlyDeliveries: req.monthlyDeliveries };
  }

  private async scopeOf(em: EntityManager, organizationId: string): Promise<string> {
    if (!organizationId) return GLOBAL_SCOPE;
    const organization = isUuid(organizationId) ? await em.findOne(OrganizationSchema, { id: organizationId }) : null;
    if (!organization) throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${organizationId.slice(0, 64)}.`);
    return organization.id;
  }
}

interface DeadLetterRow {
  delivery_id: string;
  organization_id: string;
  endpoint_id: string;
  created_at: Date;
  event_id: string;
  event_type: string;
  attempt_count: number;
  last_error: string | null;
  workflow_id: string;
}

function dateOf(timestamp: Timestamp | undefined): Date | undefined {
  return timestamp ? timestampDate(timestamp) : undefined;
}

function killSwitchMessage(state: KillSwitchState) {
  return create(KillSwitchSchema, {
    organizationId: state.scope === GLOBAL_SCOPE ? '' : state.scope,
    enabled: state.enabled,
    reason: state.reason,
    updatedAt: state.updatedAt ? timestampFromDate(state.updatedAt) : undefined,
  });
}
