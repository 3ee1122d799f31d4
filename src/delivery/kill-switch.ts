import type { EntityManager } from '../db/orm';

export const GLOBAL_SCOPE = 'global';

export interface KillSwitchState {
  scope: string;
  enabled: boolean;
  reason: string;
  updatedAt: Date | null;
}

export async function readKillSwitch(em: EntityManager, scope: string): Promise<KillSwitchState> {
  const [row] = await em.execute<{ scope: string; enabled: boolean; reason: string; updated_at: Date | string }[]>(
    'select scope, enabled, reason, updated_at from kill_switches where scope = ?',
    [scope],
  );
  // Raw queries may hand timestamptz back as a string; callers rely on a Date.
  return row
    ? { scope: row.scope, enabled: row.enabled, reason: row.reason, updatedAt: new Date(row.updated_at) }
    : { scope, enabled: false, reason: '', updatedAt: null };
}

/**
 * Sets a switch. Turning one off makes the deliveries it held due now, so they go out
 * without waiting for their next scheduled look.
 */
export async function writeKillSwitch(em: EntityManager, scope: string, enabled: boolean, reason: string, now: Date): Promise<KillSwitchState> {
  await em.execute(
    `insert into kill_switches (scope, enabled, reason, updated_at) values (?, ?, ?, ?)
     on conflict (scope) do update set enabled = excluded.enabled, reason = excluded.reason, updated_at = excluded.updated_at`,
    [scope, enabled, reason, now],
    'run',
  );
  if (!enabled) {
    await em.execute(
      `update webhook_deliveries set next_attempt_at = ?, updated_at = ?
        where status = 'held' ${scope === GLOBAL_SCOPE ? '' : 'and organization_id = ?'}`,
      scope === GLOBAL_SCOPE ? [now, now] : [now, now, scope],
      'run',
    );
  }
  return { scope, enabled, reason, updatedAt: now };
}
