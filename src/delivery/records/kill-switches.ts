import { epochMs, type EntityManager } from '../../db';
import { db, GLOBAL_SCOPE, type Schedule } from './rows';

/**
 * The kill switches (one per organization, and the global one) and the release of the
 * deliveries a switch or a paused endpoint held: released rows are due at once, and the
 * caller wakes their executors after its commit. DeliveryRecords (index.ts) is the
 * door; what each promises is written there.
 */

export interface KillSwitchState {
  scope: string;
  enabled: boolean;
  reason: string;
  updatedAt: Date | null;
}

/** A held delivery made due, with the workflow Temporal signals for it. */
export interface ReleasedDelivery {
  deliveryId: string;
  workflowId: string;
}

export async function readKillSwitch(em: EntityManager, scope: string): Promise<KillSwitchState> {
  const row = await db(em)
    .selectFrom('kill_switches')
    .select(['scope', 'enabled', 'reason', epochMs('updated_at').as('updatedAtMs')])
    .where('scope', '=', scope)
    .executeTakeFirst();
  return row ? { scope: row.scope, enabled: row.enabled, reason: row.reason, updatedAt: new Date(row.updatedAtMs) } : { scope, enabled: false, reason: '', updatedAt: null };
}

export async function writeKillSwitch(
  em: EntityManager,
  schedule: Schedule,
  scope: string,
  enabled: boolean,
  reason: string,
): Promise<{ state: KillSwitchState; released: ReleasedDelivery[] }> {
  const now = new Date(schedule.now());
  await db(em)
    .insertInto('kill_switches')
    .values({ scope, enabled, reason, updated_at: now })
    .onConflict((oc) => oc.column('scope').doUpdateSet({ enabled, reason, updated_at: now }))
    .execute();
  const released = enabled ? [] : await releaseHeld(em, schedule, scope);
  return { state: { scope, enabled, reason, updatedAt: now }, released };
}

export async function killSwitchesOn(em: EntityManager): Promise<{ global: number; organizations: number }> {
  const rows = await db(em).selectFrom('kill_switches').select(['scope']).where('enabled', '=', true).execute();
  const global = rows.filter((r) => r.scope === GLOBAL_SCOPE).length;
  return { global, organizations: rows.length - global };
}

export async function releaseHeld(em: EntityManager, schedule: Schedule, scope: string): Promise<ReleasedDelivery[]> {
  return releaseHeldOf(em, schedule, scope === GLOBAL_SCOPE ? {} : { organizationId: scope });
}

export async function releaseHeldOfEndpoint(em: EntityManager, schedule: Schedule, organizationId: string, endpointId: string): Promise<ReleasedDelivery[]> {
  return releaseHeldOf(em, schedule, { organizationId, endpointId });
}

async function releaseHeldOf(em: EntityManager, schedule: Schedule, of: { organizationId?: string; endpointId?: string }): Promise<ReleasedDelivery[]> {
  const now = new Date(schedule.now());
  let q = db(em).updateTable('webhook_deliveries').set({ next_attempt_at: now, updated_at: now }).where('status', '=', 'held');
  if (of.organizationId) q = q.where('organization_id', '=', of.organizationId);
  if (of.endpointId) q = q.where('endpoint_id', '=', of.endpointId);
  const rows = await q.returning(['id', 'workflow_id']).execute();
  return rows.map((r) => ({ deliveryId: r.id, workflowId: r.workflow_id }));
}
