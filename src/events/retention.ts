import { sql, type QueryCreator } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { statementPart, type EntityManager, type EventSchema } from '../db';

type Tables = InferKyselyDB<typeof EventSchema>;

/**
 * Retention and erasure of what published events keep: their payload (the deliveries'
 * `data`). The event row stays (id, type, times, publisher): a producer's retry with the
 * same id still finds it, and is refused EVENT_CONFLICT unless it sends `{}`, as nothing is
 * left to compare with.
 */

/**
 * Clears up to `limit` event payloads recorded before their organization's payload horizon
 * (the caller's `retention` CTE, src/endpoints/retention.ts), oldest first along the index of
 * the events that still hold one. `youngest`: the shortest horizon of any plan.
 */
export const expireEventPayloads = statementPart(
  (qc: QueryCreator<Tables & { retention: { organization_id: string; payload_before: Date } }>, youngest: Date, limit: number, now: Date) =>
    qc
      .with('expiring', (w) =>
        w
          .selectFrom('events as e')
          .innerJoin('retention as r', 'r.organization_id', 'e.organization_id')
          .select('e.id')
          .where('e.payload_removed', 'is', null)
          .where('e.created_at', '<', youngest)
          .whereRef('e.created_at', '<', 'r.payload_before')
          .orderBy('e.created_at')
          .orderBy('e.id')
          .limit(limit)
          .forUpdate('e')
          .skipLocked(),
      )
      .updateTable('events as x')
      .from('expiring as y')
      .set({ payload: sql`'{}'::jsonb`, payload_removed: 'expired', payload_removed_at: now })
      .whereRef('x.id', '=', 'y.id'),
);

/**
 * One page of an organization's events (or its one event), up to `limit`, in event id order
 * after `after` along the unique (organization_id, event_id) index: payloads erased, or
 * counted with `dryRun`. `next` is null after the last page.
 */
export async function eraseEventPayloads(
  em: EntityManager,
  which: { organizationId: string; eventId?: string },
  after: string | null,
  limit: number,
  now: Date,
  dryRun: boolean,
): Promise<{ erased: number; next: string | null }> {
  const k = em.getKysely<Tables>();
  let page = k.selectFrom('events').select(['id', 'event_id', 'payload_removed']).where('organization_id', '=', which.organizationId);
  if (which.eventId !== undefined) page = page.where('event_id', '=', which.eventId);
  if (after !== null) page = page.where('event_id', '>', after);
  const rows = await page.orderBy('event_id').limit(limit).execute();
  const toErase = rows.filter((r) => r.payload_removed !== 'erased').map((r) => r.id);
  let erased = toErase.length;
  if (!dryRun && toErase.length > 0) {
    const result = await k
      .updateTable('events')
      .set({ payload: sql`'{}'::jsonb`, payload_removed: 'erased', payload_removed_at: now })
      .where('id', 'in', toErase)
      .where((eb) => eb.or([eb('payload_removed', 'is', null), eb('payload_removed', '<>', 'erased')]))
      .executeTakeFirst();
    erased = Number(result.numUpdatedRows);
  }
  return { erased, next: rows.length === limit ? rows.at(-1)!.event_id : null };
}
