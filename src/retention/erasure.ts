import type { EntityManager } from '../db';
import type { DeliveryRecords, ErasureCounts, ErasureCursor, ErasureScope } from '../delivery';
import { eraseEventPayloads } from '../events';

/** Deliveries one statement of an erasure takes at most: a short transaction each. */
export const ERASURE_PAGE_SIZE = 500;

/** What an erasure found or did: the deliveries' and, without an endpoint, the published events' payloads. */
export interface Erasure extends ErasureCounts {
  /** Event payloads erased (or that would be). An endpoint's erasure leaves them: other endpoints' deliveries share them. */
  eventPayloads: number;
}

/**
 * Erases (or, with `dryRun`, counts) the delivery data of a scope: the payloads of its
 * finished deliveries and every response excerpt of their attempts, endpoint by endpoint,
 * page by page along each endpoint's log index, one statement and one short transaction per
 * page; then, for an organization or an event, the published events' payloads. Statuses,
 * counts and ids stay. Erasing again finds nothing more, so a run cut short (a restart, a
 * lost connection) is finished by running it again.
 */
export async function eraseDeliveryData(em: EntityManager, records: DeliveryRecords, scope: ErasureScope, dryRun: boolean, now: Date): Promise<Erasure> {
  const total: Erasure = { deliveries: 0, payloads: 0, responseExcerpts: 0, open: 0, eventPayloads: 0 };
  for (const endpointId of await records.erasureEndpoints(em, scope)) {
    let after: ErasureCursor | null = null;
    do {
      const page = await records.erasePage(em, scope, endpointId, after, ERASURE_PAGE_SIZE, dryRun);
      total.deliveries += page.counts.deliveries;
      total.payloads += page.counts.payloads;
      total.responseExcerpts += page.counts.responseExcerpts;
      total.open += page.counts.open;
      after = page.next;
    } while (after);
  }
  if (scope.endpointId === undefined) {
    let after: string | null = null;
    do {
      const page = await eraseEventPayloads(em, scope, after, ERASURE_PAGE_SIZE, now, dryRun);
      total.eventPayloads += page.erased;
      after = page.next;
    } while (after !== null);
  }
  return total;
}
