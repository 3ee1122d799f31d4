import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { changeEventId, type ChangeEvents } from '../events';
import type { EntityManager, PostSchema } from '../db';

/** Why a post is held; shown to clients as `holdReason`. */
export type HoldReason = 'connection_disabled' | 'account_changed';

type Tables = InferKyselyDB<typeof PostSchema>;
const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

/** What a moved post's event says of it; the time as epoch milliseconds (the driver hands timestamps over as text). */
const MOVED = ['id', 'organization_id', sql<number>`floor(extract(epoch from scheduled_at) * 1000)::float8`.as('scheduledAtMs')] as const;

/**
 * Holds every scheduled post of a connection; posts and their history stay. Runs in the
 * transaction of the connection change that holds them, and records a `post.held` event
 * per post in it. Returns how many.
 */
export async function holdScheduledPosts(em: EntityManager, connectionId: string, reason: HoldReason, now: Date, events: ChangeEvents): Promise<number> {
  const held = await db(em)
    .updateTable('posts')
    .set({ status: 'held', hold_reason: reason, held_at: now, updated_at: now })
    .where('connection_id', '=', connectionId)
    .where('status', '=', 'scheduled')
    .returning(MOVED)
    .execute();
  await recordMoves(em, events, 'post.held', held, connectionId, now, { holdReason: reason });
  return held.length;
}

/** Returns a connection's held posts to scheduled, in the transaction of the audited release, with a `post.released` event each. */
export async function releaseHeldPosts(em: EntityManager, connectionId: string, now: Date, events: ChangeEvents): Promise<number> {
  const released = await db(em)
    .updateTable('posts')
    .set({ status: 'scheduled', hold_reason: null, held_at: null, updated_at: now })
    .where('connection_id', '=', connectionId)
    .where('status', '=', 'held')
    .returning(MOVED)
    .execute();
  await recordMoves(em, events, 'post.released', released, connectionId, now, {});
  return released.length;
}

/** One event per moved post (README, "Events"), with an id derived from the move. */
async function recordMoves(
  em: EntityManager,
  events: ChangeEvents,
  type: 'post.held' | 'post.released',
  posts: { id: string; organization_id: string; scheduledAtMs: number }[],
  connectionId: string,
  now: Date,
  extra: Record<string, string>,
): Promise<void> {
  await events.record(
    em,
    posts.map((post) => ({
      organizationId: post.organization_id,
      eventId: changeEventId(type, post.id, now),
      eventType: type,
      payload: { postId: post.id, connectionId, scheduledAt: new Date(post.scheduledAtMs).toISOString(), ...extra },
      occurredAt: now,
    })),
  );
}
