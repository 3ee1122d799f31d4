import { epochMs, type EntityManager } from '../../db';
import { db, GLOBAL_SCOPE, type RecordsContext, type Schedule } from './rows';

/**
 * The kill switches (one per organization, and the global one) and the release of the
 * deliveries a switch or a paused endpoint held: released rows are due at once, and the
 * caller wakes their executors after its commit. Methods of DeliveryRecords (index.ts).
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

export const killSwitchMethods = {
  /** A switch as it stands; one never written reads as off. */
  async readKillSwitch(this: RecordsContext, em: EntityManager, scope: string): Promise<KillSwitchState> {
    const row = await db(em)
      .selectFrom('kill_switches')
      .select(['scope', 'enabled', 'reason', epochMs('updated_at').as('updatedAtMs')])
      .where('scope', '=', scope)
      .executeTakeFirst();
    return row ? { scope: row.scope, enabled: row.enabled, reason: row.reason, updatedAt: new Date(row.updatedAtMs) } : { scope, enabled: false, reason: '', updatedAt: null };
  },

  /** Sets a switch; turning one off releases what it held (releaseHeld) and returns those deliveries. */
  async writeKillSwitch(
    this: RecordsContext,
    em: EntityManager,
    scope: string,
    enabled: boolean,
    reason: string,
  ): Promise<{ state: KillSwitchState; released: ReleasedDelivery[] }> {
    const now = new Date(this.schedule.now());
    await db(em)
      .insertInto('kill_switches')
      .values({ scope, enabled, reason, updated_at: now })
      .onConflict((oc) => oc.column('scope').doUpdateSet({ enabled, reason, updated_at: now }))
      .execute();
    const released = enabled ? [] : await releaseHeldOf(em, this.schedule, switchedOff(scope));
    return { state: { scope, enabled, reason, updatedAt: now }, released };
  },

  /** Switches on now: the global one (0 or 1) and how many organizations'. */
  async killSwitchesOn(this: RecordsContext, em: EntityManager): Promise<{ global: number; organizations: number }> {
    const rows = await db(em).selectFrom('kill_switches').select(['scope']).where('enabled', '=', true).execute();
    const global = rows.filter((r) => r.scope === GLOBAL_SCOPE).length;
    return { global, organizations: rows.length - global };
  },

  /** A kill switch went off: the deliveries it held are due now. Returns them (Temporal signals their workflows). */
  async releaseHeld(this: RecordsContext, em: EntityManager, scope: string): Promise<ReleasedDelivery[]> {
    return releaseHeldOf(em, this.schedule, switchedOff(scope));
  },

  /** An endpoint was resumed: its held deliveries are due now, as a kill switch's release makes them. Returns them. */
  async releaseHeldOfEndpoint(this: RecordsContext, em: EntityManager, organizationId: string, endpointId: string): Promise<ReleasedDelivery[]> {
    return releaseHeldOf(em, this.schedule, { organizationId, endpointId });
  },
};

/** The held deliveries a switch of `scope` going off releases. */
function switchedOff(scope: string): { organizationId?: string } {
  return scope === GLOBAL_SCOPE ? {} : { organizationId: scope };
}

async function releaseHeldOf(em: EntityManager, schedule: Schedule, of: { organizationId?: string; endpointId?: string }): Promise<ReleasedDelivery[]> {
  const now = new Date(schedule.now());
  let q = db(em).updateTable('webhook_deliveries').set({ next_attempt_at: now, updated_at: now }).where('status', '=', 'held');
  if (of.organizationId) q = q.where('organization_id', '=', of.organizationId);
  if (of.endpointId) q = q.where('endpoint_id', '=', of.endpointId);
  const rows = await q.returning(['id', 'workflow_id']).execute();
  return rows.map((r) => ({ deliveryId: r.id, workflowId: r.workflow_id }));
}
