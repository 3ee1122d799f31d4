import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { JsonObject } from '@bufbuild/protobuf';
import type { Logger } from '../config';
import { epochMs, isUuid, type EntityManager, type EventSchema, type Organization, type Plan } from '../db';
import { CompiledStatement, type DeliveryEngine, type DeliveryRecords, type EventDelivery } from '../delivery';
import { apiError } from '../errors';
import {
  EVENT_NAME_PATTERN,
  MAX_EVENT_NAME_LENGTH,
  PLANS_WITHOUT_DELIVERIES,
  deliveriesCountedThisMonth,
  deliveryMonthOf,
  deliveryQuotaLeft,
  planIncludesDeliveries,
  quotaRefusalOf,
  takeDeliveryQuotaUpTo,
} from '../webhooks';

/** Limits of the contract the README documents (Internal event service). */
export const MAX_EVENTS_PER_CALL = 100;
export const MAX_PAYLOAD_BYTES = 256 * 1024;
export const MAX_EVENT_ID_LENGTH = 128;
/** Letters, digits and `. _ : -`, starting with a letter or digit: safe in logs, URLs and workflow ids. */
export const EVENT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
/** Emitted by the test route only, so a receiver can tell a test from a real event. */
export const RESERVED_EVENT_TYPES: readonly string[] = ['webhook.test'];
export const PLAN_EXCLUDES_WEBHOOKS = 'PLAN_EXCLUDES_WEBHOOKS';

/** An event as a producer hands it over. */
export interface NewEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  /** The delivered body's `data`; absent means {}. */
  payload?: JsonObject;
  /** Absent means when it is recorded. */
  occurredAt?: Date;
}

/** An event as recorded, with its deliveries. */
export interface PublishedEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  occurredAt: Date;
  recordedAt: Date;
  publisher: string;
  skippedReason: string | null;
  /** True when the event was recorded before and this publish recorded nothing. */
  replayed: boolean;
  deliveries: EventDelivery[];
}

type Tables = InferKyselyDB<typeof EventSchema>;

const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

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

  /** Records the events in one transaction, then starts their new deliveries once it committed. */
  async publish(em: EntityManager, events: NewEvent[], publisher: string): Promise<PublishedEvent[]> {
    const published = await em.transactional((tx) => this.publishEvents(tx, events, publisher));
    await this.startDeliveries(published);
    return published;
  }

  /**
   * Records the events and their deliveries in the caller's transaction, so an event is
   * stored exactly when the change that caused it is. Validates every event before
   * writing anything; a refusal names the event by its index, and one found while writing
   * (an unknown organization, a conflicting republish) leaves the transaction to roll back
   * what was written. The deliveries are due at once (the embedded engine finds them by
   * polling); call startDeliveries after the commit so that Temporal starts them without
   * waiting for the pending sweep.
   *
   * A constant number of statements, however many events and endpoints: the organizations
   * read and the events recorded in one, the republished ones compared in one select, every
   * delivery in one insert, and last the quota, one statement per organization with
   * deliveries to send, so that the lock on its month's count is held from there to the
   * commit only.
   */
  async publishEvents(tx: EntityManager, events: NewEvent[], publisher: string): Promise<PublishedEvent[]> {
    const checked = events.map(checkEvent);
    const now = new Date(this.deps.now());
    const firstIndex = new Map<string, number>();
    checked.forEach((event, index) => {
      if (!firstIndex.has(keyOf(event))) firstIndex.set(keyOf(event), index);
    });
    const firsts = [...firstIndex.values()].map((index) => checked[index]!);
    const { organizations, recorded } = await this.recordEvents(tx, firsts, publisher, now);
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

    const fannedOut = firsts.filter((event) => recorded.has(keyOf(event)) && planIncludesDeliveries(organizations.get(event.organizationId)!));
    const deliveries = await this.deps.deliveries.recordForSubscribers(
      tx,
      fannedOut.map((event) => ({ organizationId: event.organizationId, eventId: event.eventId, eventType: event.eventType, payload: bodyOf(event, now) })),
      {
        sendable: new Map([...organizations.values()].map((o) => [o.id, deliveryQuotaLeft(o, o.counted)])),
        refusal: new Map([...organizations.values()].map((o) => [o.id, quotaRefusalOf(o)])),
      },
    );
    const earlier = [...existing.values()].filter((row) => !recorded.has(keyOf(row)));
    const deliveriesOf = groupByEvent([...deliveries, ...(await this.deps.deliveries.listByEvents(tx, uniqueEvents(earlier)))]);
    await this.takeQuota(tx, fannedOut, deliveriesOf, organizations, now);

    return checked.map((event, index) => {
      const key = keyOf(event);
      const row = existing.get(index);
      const base: Omit<PublishedEvent, 'deliveries'> = row
        ? { ...row, replayed: true }
        : {
            organizationId: event.organizationId,
            eventId: event.eventId,
            eventType: event.eventType,
            occurredAt: event.occurredAt ?? now,
            recordedAt: now,
            publisher,
            skippedReason: planIncludesDeliveries(organizations.get(event.organizationId)!) ? null : PLAN_EXCLUDES_WEBHOOKS,
            replayed: false,
          };
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
   * Records the events whose organization exists, in one statement that also reads those
   * organizations with the deliveries counted against their quotas this month (as last
   * committed). Returns the organizations found and the events recorded now (an event
   * recorded before is left as it is, and not among them).
   */
  private async recordEvents(
    tx: EntityManager,
    events: CheckedEvent[],
    publisher: string,
    now: Date,
  ): Promise<{ organizations: Map<string, PublishingOrganization>; recorded: Set<string> }> {
    const known = events.filter((e) => isUuid(e.organizationId));
    if (known.length === 0) return { organizations: new Map(), recorded: new Set() };
    const rows = await recordEventsStatement.execute(db(tx), {
      organizationIds: [...new Set(known.map((e) => e.organizationId))],
      month: deliveryMonthOf(now),
      eventOrganizationIds: known.map((e) => e.organizationId),
      eventIds: known.map((e) => e.eventId),
      eventTypes: known.map((e) => e.eventType),
      payloads: known.map((e) => e.payloadJson),
      occurredAt: known.map((e) => e.occurredAt ?? now),
      publisher,
      now,
    });
    return {
      organizations: new Map(
        rows.map((r) => [
          r.id,
          { id: r.id, plan: r.plan, monthlyDeliveryQuota: r.monthly_delivery_quota === null ? null : Number(r.monthly_delivery_quota), counted: Number(r.counted ?? 0) },
        ]),
      ),
      recorded: new Set(rows.flatMap((r) => r.recorded.map((eventId) => keyOf({ organizationId: r.id, eventId })))),
    };
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

  /**
   * Counts the pending deliveries just recorded against their organizations' quotas, in the
   * order they were recorded (events in order, oldest endpoint first), and records those
   * beyond what was granted failed with the reason: recordForSubscribers made pending only
   * what the quota had left as last committed, and concurrent publishes may have taken
   * some of it since. Organizations in a fixed order, so two batches never wait on each other.
   */
  private async takeQuota(
    tx: EntityManager,
    fannedOut: CheckedEvent[],
    deliveriesOf: Map<string, EventDelivery[]>,
    organizations: Map<string, PublishingOrganization>,
    now: Date,
  ): Promise<void> {
    const pending = new Map<string, EventDelivery[]>();
    for (const event of fannedOut) {
      for (const delivery of deliveriesOf.get(keyOf(event)) ?? []) {
        if (delivery.status !== 'pending') continue;
        const list = pending.get(event.organizationId) ?? [];
        if (list.length === 0) pending.set(event.organizationId, list);
        list.push(delivery);
      }
    }
    for (const organizationId of [...pending.keys()].sort()) {
      const organization = organizations.get(organizationId)!;
      const wanted = pending.get(organizationId)!;
      const { granted } = await takeDeliveryQuotaUpTo(tx, organization, now, wanted.length);
      const refused = wanted.slice(granted);
      if (refused.length === 0) continue;
      const reason = quotaRefusalOf(organization);
      await this.deps.deliveries.refuse(tx, refused.map((d) => d.id), reason);
      for (const delivery of refused) Object.assign(delivery, { status: 'failed', lastError: reason, nextAttemptAtMs: null });
    }
  }
}

type PublishingOrganization = Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'> & { counted: number };

type RecordedEvent = Omit<PublishedEvent, 'deliveries'> & { samePayload: boolean };

const keyOf = (event: { organizationId: string; eventId: string }) => `${event.organizationId}/${event.eventId}`;

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

/** The delivered body: the same bytes as JSON.stringify of { id, type, createdAt, data }, without serialising the payload again. */
function bodyOf(event: CheckedEvent, now: Date): string {
  return `{"id":${JSON.stringify(event.eventId)},"type":${JSON.stringify(event.eventType)},"createdAt":${JSON.stringify((event.occurredAt ?? now).toISOString())},"data":${event.payloadJson}}`;
}

interface CheckedEvent extends NewEvent {
  payload: JsonObject;
  payloadJson: string;
}

/** Refuses what no retry could fix, before anything is written; `index` names the event in a batch. */
function checkEvent(event: NewEvent, index: number): CheckedEvent {
  const refuse = (code: Parameters<typeof apiError>[0], message: string) => apiError(code, message, { metadata: { index: String(index) } });
  if (event.eventId.length === 0 || event.eventId.length > MAX_EVENT_ID_LENGTH || !EVENT_ID_PATTERN.test(event.eventId)) {
    throw refuse(
      'EVENT_ID_INVALID',
      `An event id is 1 to ${MAX_EVENT_ID_LENGTH} letters, digits, ".", "_", ":" or "-", starting with a letter or digit.`,
    );
  }
  if (event.eventType.length > MAX_EVENT_NAME_LENGTH || !EVENT_NAME_PATTERN.test(event.eventType)) {
    throw refuse('EVENT_TYPE_INVALID', `"${event.eventType.slice(0, MAX_EVENT_NAME_LENGTH)}" is not an event type: use dot-separated lowercase words such as "post.held".`);
  }
  if (RESERVED_EVENT_TYPES.includes(event.eventType)) {
    throw refuse('EVENT_TYPE_RESERVED', `${event.eventType} is sent by the test route only.`);
  }
  const payload = event.payload ?? {};
  const payloadJson = JSON.stringify(payload);
  if (Buffer.byteLength(payloadJson) > MAX_PAYLOAD_BYTES) {
    throw refuse('EVENT_PAYLOAD_TOO_LARGE', `The payload must be at most ${MAX_PAYLOAD_BYTES} bytes as JSON.`);
  }
  return { ...event, payload, payloadJson };
}

interface RecordEventsParams {
  organizationIds: string[];
  month: string;
  eventOrganizationIds: string[];
  eventIds: string[];
  eventTypes: string[];
  payloads: string[];
  occurredAt: Date[];
  publisher: string;
  now: Date;
}

/** recordEvents' statement, compiled once: every publish runs it. */
const recordEventsStatement = new CompiledStatement((k: Kysely<Tables>, p: RecordEventsParams) => {
  const statement = sql<{ id: string; plan: Plan; monthly_delivery_quota: string | null; counted: string | null; recorded: string[] }>`
    with organization as (
      select o.id, o.plan, o.monthly_delivery_quota, ${deliveriesCountedThisMonth(sql.ref('o.id'), p.month)} as counted
        from organizations o
       where o.id = any(${p.organizationIds}::uuid[])
    ), recorded as (
      insert into events (id, organization_id, event_id, event_type, payload, occurred_at, publisher, skipped_reason, created_at)
      select gen_random_uuid(), v.organization_id, v.event_id, v.event_type, v.payload::jsonb, v.occurred_at, ${p.publisher}::text,
             case when o.plan::text = any(${PLANS_WITHOUT_DELIVERIES}::text[]) then ${PLAN_EXCLUDES_WEBHOOKS}::text end, ${p.now}::timestamptz
        from unnest(${p.eventOrganizationIds}::uuid[], ${p.eventIds}::text[], ${p.eventTypes}::text[], ${p.payloads}::text[], ${p.occurredAt}::timestamptz[])
             with ordinality as v(organization_id, event_id, event_type, payload, occurred_at, i)
        join organization o on o.id = v.organization_id
       order by v.i
      on conflict (organization_id, event_id) do nothing
      returning organization_id, event_id
    )
    select o.id, o.plan, o.monthly_delivery_quota, o.counted,
           array(select r.event_id from recorded r where r.organization_id = o.id) as recorded
      from organization o`;
  return { compile: () => statement.compile(k) };
});

function eventColumns(k: Kysely<Tables>) {
  return k
    .selectFrom('events')
    .select(['organization_id', 'event_id', 'event_type', 'publisher', 'skipped_reason', epochMs('occurred_at').as('occurredAtMs'), epochMs('created_at').as('recordedAtMs')]);
}

interface EventRow {
  organization_id: string;
  event_id: string;
  event_type: string;
  publisher: string;
  skipped_reason: string | null;
  occurredAtMs: number;
  recordedAtMs: number;
}

function eventOf(row: EventRow, replayed: boolean): Omit<PublishedEvent, 'deliveries'> {
  return {
    organizationId: row.organization_id,
    eventId: row.event_id,
    eventType: row.event_type,
    occurredAt: new Date(row.occurredAtMs),
    recordedAt: new Date(row.recordedAtMs),
    publisher: row.publisher,
    skippedReason: row.skipped_reason,
    replayed,
  };
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

  /** Call once the change's transaction committed. */
  async committed(): Promise<void> {
    await this.publisher.startDeliveries(this.published);
  }
}

/** An event id derived from the change it reports, so a change is one event, sent once per endpoint. */
export function changeEventId(type: string, subjectId: string, at: Date): string {
  return `${type}:${subjectId}:${at.getTime()}`;
}
