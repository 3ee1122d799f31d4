import type { EntityManager } from '../db/orm';

/** Why a post is held; shown to clients as `holdReason`. */
export type HoldReason = 'connection_disabled' | 'account_changed';

/**
 * Holds every scheduled post of a destination; posts and their history stay. Runs in the
 * transaction of the destination change that holds them. Returns how many.
 */
export async function holdScheduledPosts(em: EntityManager, connectionId: string, reason: HoldReason, now: Date): Promise<number> {
  const result = await em.execute<{ affectedRows: number }>(
    `update posts set status = 'held', hold_reason = ?, held_at = ?, updated_at = ?
      where connection_id = ? and status = 'scheduled'`,
    [reason, now, now, connectionId],
    'run',
  );
  return result.affectedRows;
}

/** Returns a destination's held posts to scheduled, in the transaction of the audited release. */
export async function releaseHeldPosts(em: EntityManager, connectionId: string, now: Date): Promise<number> {
  const result = await em.execute<{ affectedRows: number }>(
    `update posts set status = 'scheduled', hold_reason = null, held_at = null, updated_at = ?
      where connection_id = ? and status = 'held'`,
    [now, connectionId],
    'run',
  );
  return result.affectedRows;
}
