import { sql } from 'kysely';
import type { Logger } from '../config';
import { epochMs, isUniqueViolation, isUuid, type EntityManager } from '../db';
import { DELIVERY_EVENT_UNIQUE, type DeliveryEngine, type DeliveryRecords, type EventDelivery } from '../delivery';
import { apiError } from '../errors';
import { checkEvent, type CheckedEvent, type NewEvent, type PublishedEvent } from './event';
import { db, eventColumns, eventOf, keyOf, recordEvents, type EventRow } from './publish-statement';

export interface EventPublisherDeps {
  /** Owner of the delivery rows. */
  deliveries: DeliveryRecords;
  engine: Pick<DeliveryEngine, 'start'>;
  logger: Logger;
  now: () => number;
}

/**
 * Owner of the events table: records events and fans each out to the subscribed
 * endpoints of its organization, under the same plans and quotas as test deliveries.
 */
export class EventPublisher {
  constructor(private readonly deps: EventPublisherDeps) {}

  /** Collects the platform events of one change (see ChangeEvents). */
  forChange(): ChangeEvents {
    return new ChangeEvents(this);
  }

  /**
   * Records the events, all or none, then starts their new deliveries once that committed.
   * One event is recorded by one statement, which commits on its own (publishEvents writes
   * nothing else); a batch takes a transaction.
   */
  async publish(em: EntityManager, events: NewEvent[], publisher: string): Promise<PublishedEvent[]> {
    const published =
      events.length === 1 ? await this.publishEvents(em, events, publisher) : await em.transactional((tx) => this.publishEvents(tx, events, publisher));
    await this.startDeliveries(published);
    return published;
  }

  /**
   * Records the events and their deliveries in the caller's transaction, so an event is
   * stored exactly when the change that caused it is. Validates every event before
   * writing anything; a refusal names the event by its index, and one found after the
   * write (an unknown organization, a conflicting republish) leaves the transaction to roll
   * back what was written. The deliveries are due at once (the embedded engine finds them
   * by polling); call startDeliveries after the commit so that Temporal starts them without
   * waiting for the pending sweep.
   *
   * The events, the quota's count and the deliveries are written by one statement
   * (publishStatement), however many events and endpoints: on its own, outside a
   * transaction, it records one event all or nothing. Before it, at most once a month, the
   * month's count is created (empty, so nothing depends on it alone); after it come only
   * reads: the republished events, compared in one select, and their deliveries.
   */
  async publishEvents(tx: EntityManager, events: NewEvent[], publisher: string): Promise<PublishedEvent[]> {
    const checked = events.map(checkEvent);
    const now = new Date(this.deps.now());
    const firstIndex = new Map<string, number>();
    checked.forEach((event, index) => {
      if (!firstIndex.has(keyOf(event))) firstIndex.set(keyOf(event), index);
    });
    const firsts = [...firstIndex.values()].map((index) => checked[index]!);
    const { organizations, recorded, deliveries } = await recordEvents(tx, firsts, publisher, now).catch((error: unknown) => {
      throw isUniqueViolation(error, DELIVERY_EVENT_UNIQUE) ? takenByAnotherDelivery(error, checked) : error;
    });
    checked.forEach((event, index) => {
      if (!organizations.has(event.organizationId)) {
        throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${event.organizationId.slice(0, 64)}.`, { metadata: { index: String(index) } });
      }
    });
    const isNew = (index: number) => recorded.has(keyOf(checked[index]!)) && firstIndex.get(keyOf(checked[index]!)) === index;

    // Each event not recorded by this call is a republish: of an earlier event, or of one earlier in this batch.
    const existing = await this.recordedBefore(tx, checked, (index) => !isNew(index));
    for (const [index, row] of existing) {
      const event = checked[index]!;
      if (row.eventType !== event.eventType || !row.samePayload) {
        throw apiError('EVENT_CONFLICT', `Event ${event.eventId} was published before with another type or payload.`, {
          metadata: { index: String(index), eventId: event.eventId },
        });
      }
    }
    const earlier = [...existing.values()].filter((row) => !recorded.has(keyOf(row)));
    const deliveriesOf = groupByEvent([...deliveries, ...(await this.deps.deliveries.listByEvents(tx, uniqueEvents(earlier)))]);

    return checked.map((event, index) => {
      const key = keyOf(event);
      const row = existing.get(index);
      const base: Omit<PublishedEvent, 'deliveries'> = row ? { ...row, replayed: true } : recorded.get(key)!;
      return { ...base, deliveries: deliveriesOf.get(key) ?? [] };
    });
  }

  /** Starts the deliveries these publishes recorded, outside any transaction (Temporal is over the network). */
  async startDeliveries(published: PublishedEvent[]): Promise<void> {
    const queue = published.filter((e) => !e.replayed).flatMap((e) => e.deliveries.filter((d) => d.status === 'pending').map((d) => ({ event: e, delivery: d })));
    const startNext = async (): Promise<void> => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const { event, delivery } = next;
        const ref = { deliveryId: delivery.id, organizationId: event.organizationId, endpointId: delivery.endpointId, eventId: event.eventId };
        try {
          await this.deps.engine.start(ref, { eventType: event.eventType, targetHost: new URL(delivery.endpointUrl).host });
        } catch (error) {
          // Recorded and pending: the pending sweep starts it again. The producer's call succeeded.
          this.deps.logger.warn({ err: error, deliveryId: delivery.id }, 'could not start an event delivery; the pending sweep retries it');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(16, queue.length) }, startNext));
  }

  /** An event with its deliveries, for operators; null when the organization has no such event. */
  async find(em: EntityManager, organizationId: string, eventId: string): Promise<PublishedEvent | null> {
    if (!isUuid(organizationId)) return null;
    const row = await eventColumns(db(em)).where('organization_id', '=', organizationId).where('event_id', '=', eventId).executeTakeFirst();
    if (!row) return null;
    return { ...eventOf(row, false), deliveries: await this.deps.deliveries.listByEvents(em, [{ organizationId, eventId }]) };
  }

  /**
   * The recorded events among `which` of the batch, by index, each with whether its
   * payload equals the one given there (as jsonb: key order and spacing do not count).
   * Sees the events this transaction just inserted too.
   */
  private async recordedBefore(tx: EntityManager, events: CheckedEvent[], which: (index: number) => boolean): Promise<Map<number, RecordedEvent>> {
    const asked = events.map((event, index) => ({ event, index })).filter(({ index }) => which(index));
    if (asked.length === 0) return new Map();
    const { rows } = await sql<{ i: string } & EventRow & { samePayload: boolean }>`
      select c.i, ev.organization_id, ev.event_id, ev.event_type, ev.publisher, ev.skipped_reason,
             ${epochMs('ev.occurred_at')} as "occurredAtMs", ${epochMs('ev.created_at')} as "recordedAtMs",
             ev.payload = c.payload as "samePayload"
        from unnest(${asked.map((a) => a.event.organizationId)}::uuid[], ${asked.map((a) => a.event.eventId)}::text[],
                    ${asked.map((a) => a.event.payloadJson)}::jsonb[], ${asked.map((a) => a.index)}::int[])
             as c(organization_id, event_id, payload, i)
        join events ev on ev.organization_id = c.organization_id and ev.event_id = c.event_id
       order by c.i`.execute(db(tx));
    return new Map(rows.map((row) => [Number(row.i), { ...eventOf(row, true), samePayload: row.samePayload }]));
  }
}

type RecordedEvent = Omit<PublishedEvent, 'deliveries'> & { samePayload: boolean };

function uniqueEvents(events: { organizationId: string; eventId: string }[]): { organizationId: string; eventId: string }[] {
  return [...new Map(events.map((e) => [keyOf(e), { organizationId: e.organizationId, eventId: e.eventId }])).values()];
}

function groupByEvent(deliveries: EventDelivery[]): Map<string, EventDelivery[]> {
  const byEvent = new Map<string, EventDelivery[]>();
  for (const delivery of deliveries) {
    const key = keyOf(delivery);
    const list = byEvent.get(key);
    if (list) list.push(delivery);
    else byEvent.set(key, [delivery]);
  }
  return byEvent;
}

/**
 * The refusal of an event whose id an endpoint's test delivery (`evt_` and 32 hex digits)
 * took already: deliveries are unique per endpoint and event id, so it cannot be sent there.
 * PostgreSQL names the event id in the violation's detail.
 */
function takenByAnotherDelivery(error: unknown, events: CheckedEvent[]): Error {
  const { detail, cause } = error as { detail?: unknown; cause?: { detail?: unknown } };
  const eventId = /=\([^,]+, (.*)\) already exists/.exec(String(detail ?? cause?.detail ?? ''))?.[1];
  const index = events.findIndex((e) => e.eventId === eventId);
  return apiError('EVENT_CONFLICT', `Event id ${eventId ?? 'of this call'} is taken by another delivery (a test delivery) to an endpoint of the organization.`, {
    metadata: index >= 0 ? { index: String(index), eventId: eventId! } : {},
  });
}

/** Who the platform's own events are recorded as published by. */
export const PLATFORM_PUBLISHER = 'platform';

/**
 * The platform's own events of one change (a connection verified, held or disconnected; a
 * post held or released): recorded in the change's transaction, so none is lost and none
 * is sent for a change that rolled back; their deliveries start once it committed.
 */
export class ChangeEvents {
  private readonly published: PublishedEvent[] = [];

  constructor(private readonly publisher: EventPublisher) {}

  async record(tx: EntityManager, events: NewEvent[]): Promise<void> {
    if (events.length === 0) return;
    this.published.push(...(await this.publisher.publishEvents(tx, events, PLATFORM_PUBLISHER)));
  }

  /** Records the one event of a change to `subjectId` at `at`, its id derived from them (changeEventId). */
  async recordChange(tx: EntityManager, change: Omit<NewEvent, 'eventId' | 'occurredAt'> & { subjectId: string; at: Date }): Promise<void> {
    const { subjectId, at, ...event } = change;
    await this.record(tx, [{ ...event, eventId: changeEventId(event.eventType, subjectId, at), occurredAt: at }]);
  }

  /** Call once the change's transaction committed. */
  async committed(): Promise<void> {
    await this.publisher.startDeliveries(this.published);
  }
}

/** An event id derived from the change it reports, so a change is one event, sent once per endpoint. */
export function changeEventId(type: string, subjectId: string, at: Date): string {
  return `${type}:${subjectId}:${at.getTime()}`;
}
