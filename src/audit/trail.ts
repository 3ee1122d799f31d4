import type { EntityManager } from '../db';

export type AuditOutcome = 'succeeded' | 'refused' | 'failed';

export interface AuditEntry {
  organizationId: string | null;
  actorUserId: string | null;
  apiKeyId: string | null;
  /** The portal session that acted (then no user or key did). */
  portalSessionId?: string | null;
  action: string;
  targetId: string | null;
  outcome: AuditOutcome;
  /** Stable error code of a refusal or failure. */
  reason: string | null;
  requestId: string | null;
  details?: Record<string, unknown>;
}

/** Appends one event; the table refuses updates and deletes, so this is the only write. */
export async function appendAuditEvent(em: EntityManager, entry: AuditEntry): Promise<void> {
  await em.execute(
    `insert into audit_events (organization_id, actor_user_id, api_key_id, portal_session_id, action, target_id, outcome, reason, request_id, details)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [
      entry.organizationId,
      entry.actorUserId,
      entry.apiKeyId,
      entry.portalSessionId ?? null,
      entry.action,
      entry.targetId,
      entry.outcome,
      entry.reason,
      entry.requestId,
      JSON.stringify(entry.details ?? {}),
    ],
    'run',
  );
}

export interface AuditEventRow {
  id: string;
  occurred_at: Date;
  organization_id: string | null;
  actor_user_id: string | null;
  api_key_id: string | null;
  action: string;
  target_id: string | null;
  outcome: AuditOutcome;
  reason: string | null;
  request_id: string | null;
  details: Record<string, unknown>;
}

export interface AuditQuery {
  organizationId?: string;
  action?: string;
  since?: Date;
  until?: Date;
  /** Only events with an id below this (keyset pagination, newest first). */
  beforeId?: string;
  limit: number;
}

export async function queryAuditEvents(em: EntityManager, query: AuditQuery): Promise<AuditEventRow[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  const filter = (clause: string, value: unknown) => {
    if (value === undefined || value === '') return;
    where.push(clause);
    params.push(value);
  };
  filter('organization_id = ?', query.organizationId);
  filter('action = ?', query.action);
  filter('occurred_at >= ?', query.since);
  filter('occurred_at < ?', query.until);
  filter('id < ?', query.beforeId);
  params.push(query.limit);
  // Order by the bigint column: a bare "id" would name the id::text output column and sort "99" above "230".
  return em.execute<AuditEventRow[]>(
    `select id::text, occurred_at, organization_id, actor_user_id, api_key_id, action, target_id, outcome, reason, request_id, details
       from audit_events ${where.length ? `where ${where.join(' and ')}` : ''}
      order by audit_events.id desc limit ?`,
    params,
  );
}
