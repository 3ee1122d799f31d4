/** What the operator CLI prints of the service's answers: for people, and as proto3 JSON for scripts (--json). */
import { toJson, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import { timestampDate, type Timestamp } from '@bufbuild/protobuf/wkt';
import { workflowUiLink } from '../delivery';
import {
  AuditEventSchema,
  DeadLetterSchema,
  KillSwitchSchema,
  DeliveryRecordSchema,
  GetEventResponseSchema,
  type AuditEvent,
  type GetEventResponse,
  type DeadLetter,
  type DeliveryRecord,
  type KillSwitch,
} from '../gen/publishing/operator/v1/operator_service_pb';
import { WebhookRecoverySchema, type WebhookRecovery } from '../gen/publishing/v1/webhook_service_pb';

export interface Output {
  /** What --json prints. */
  json: unknown;
  /** What people read. */
  text: string;
}

export interface TemporalUi {
  url: string;
  namespace: string;
}

export function json<S extends DescMessage>(schema: S, message: MessageShape<S>): unknown {
  return toJson(schema, message, { alwaysEmitImplicit: true });
}

function when(timestamp: Timestamp | undefined): string {
  return timestamp ? timestampDate(timestamp).toISOString() : '-';
}

export function killSwitchOutput(killSwitch: KillSwitch | undefined): Output {
  if (!killSwitch) throw new Error('the service answered without a kill switch');
  const scope = killSwitch.organizationId ? `organization ${killSwitch.organizationId}` : 'global';
  const lines = [`kill switch (${scope}): ${killSwitch.enabled ? 'ON, deliveries are held' : 'off'}`];
  if (killSwitch.reason) lines.push(`reason: ${killSwitch.reason}`);
  lines.push(`updated: ${killSwitch.updatedAt ? when(killSwitch.updatedAt) : 'never set'}`);
  return { json: json(KillSwitchSchema, killSwitch), text: `${lines.join('\n')}\n` };
}

export function deadLettersOutput(deadLetters: DeadLetter[]): Output {
  const text = deadLetters.length
    ? deadLetters
        .map((d) =>
          [
            `${when(d.deadLetteredAt)}  delivery ${d.deliveryId}  ${d.eventType} ${d.eventId}  attempts ${d.attemptCount}`,
            `    organization ${d.organizationId}  endpoint ${d.endpointId}`,
            `    workflow ${d.workflowId}`,
            `    last error: ${d.lastError || '-'}`,
          ].join('\n'),
        )
        .join('\n')
    : 'no dead letters';
  return { json: deadLetters.map((d) => json(DeadLetterSchema, d)), text: `${text}\n` };
}

export function auditOutput(events: AuditEvent[]): Output {
  const field = (name: string, value: string) => (value ? `  ${name} ${value}` : '');
  const text = events.length
    ? events
        .map(
          (e) =>
            `${when(e.occurredAt)}  #${e.id}  ${e.action}  ${e.outcome}${field('reason', e.reason)}` +
            `${field('org', e.organizationId)}${field('user', e.actorUserId)}${field('key', e.apiKeyId)}` +
            `${field('target', e.targetId)}${field('request', e.requestId)}`,
        )
        .join('\n')
    : 'no audit events';
  return { json: events.map((e) => json(AuditEventSchema, e)), text: `${text}\n` };
}

/** Why Temporal's attempt number can be higher than the attempts listed here (README, "Temporal's attempt number"). */
const TEMPORAL_ATTEMPT_NOTE =
  "attempts here are sends; Temporal's activity attempt is one higher for each execution that ended without a send (a worker lost, or its result lost in a Temporal restart: retried after the 15 s heartbeat timeout)";

export function deliveryOutput(delivery: DeliveryRecord | undefined, ui: TemporalUi | null): Output {
  if (!delivery) throw new Error('the service answered without a delivery');
  const lines = [
    `delivery ${delivery.deliveryId}  ${delivery.eventType} ${delivery.eventId}`,
    `  status ${delivery.status}${delivery.deadLettered ? ` (dead-lettered ${when(delivery.deadLetteredAt)})` : ''}  attempts ${delivery.attemptCount}`,
    `  organization ${delivery.organizationId}  endpoint ${delivery.endpointId}`,
    `  workflow ${delivery.workflowId}`,
    ...(ui ? [`  temporal ui ${workflowUiLink(ui.url, ui.namespace, delivery.workflowId)}`, `  ${TEMPORAL_ATTEMPT_NOTE}`] : []),
    `  created ${when(delivery.createdAt)}  next attempt ${when(delivery.nextAttemptAt)}  delivered ${when(delivery.deliveredAt)}`,
    `  last error: ${delivery.lastError || '-'}`,
    ...delivery.attempts.map(
      (a) =>
        `  ${a.series}#${a.attempt}  ${when(a.startedAt)}  ${a.finishedAt ? `${a.durationMs} ms` : 'running'}  ` +
        `${a.dispatchedAt ? 'sent' : 'not sent'}  HTTP ${a.httpStatus || '-'}  ${a.error ? `${a.errorClass || 'error'}: ${a.error}` : 'ok'}`,
    ),
  ];
  if (delivery.attempts.length === 0) lines.push('  no attempts');
  return { json: json(DeliveryRecordSchema, delivery), text: `${lines.join('\n')}\n` };
}

export function eventOutput(answer: GetEventResponse): Output {
  const event = answer.event;
  if (!event) throw new Error('the service answered without an event');
  const lines = [
    `event ${event.eventId}  ${event.eventType}  organization ${event.organizationId}`,
    `occurred ${when(event.occurredAt)}  recorded ${when(event.recordedAt)}  published by ${event.publisher}`,
  ];
  if (event.skippedReason) lines.push(`no deliveries: ${event.skippedReason}`);
  lines.push(
    ...(answer.deliveries.length
      ? answer.deliveries.map(
          (d) =>
            `  ${d.status.padEnd(13)} delivery ${d.deliveryId}  endpoint ${d.endpointId}  attempts ${d.attemptCount}` +
            `${d.lastError ? `\n    last error: ${d.lastError}` : ''}`,
        )
      : ['  no deliveries']),
  );
  return { json: json(GetEventResponseSchema, answer), text: `${lines.join('\n')}\n` };
}

export function recoveryOutput(recovery: WebhookRecovery | undefined, organizationId: string, extra: { found?: number; replayed?: boolean } = {}): Output {
  if (!recovery) throw new Error('the service answered without a recovery');
  const lines = [
    `recovery ${recovery.id}  ${recovery.state}${recovery.stoppedReason ? ` (${recovery.stoppedReason})` : ''}${extra.replayed ? '  (asked before: this is the first job)' : ''}`,
    `  organization ${organizationId}  endpoint ${recovery.endpointId}`,
    `  window ${when(recovery.since)} to ${when(recovery.until)}  found ${recovery.found}  resent ${recovery.resent}`,
    `  created ${when(recovery.createdAt)}  started ${when(recovery.startedAt)}  finished ${when(recovery.finishedAt)}`,
  ];
  return { json: { organizationId, ...(json(WebhookRecoverySchema, recovery) as object), ...extra }, text: `${lines.join('\n')}\n` };
}
