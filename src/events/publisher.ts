import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { JsonObject } from '@bufbuild/protobuf';
import type { Logger } from '../config';
import {
  CompiledStatement,
  epochMs,
  isUniqueViolation,
  isUuid,
  type DeliveryUsageSchema,
  type EntityManager,
  type EventSchema,
  type OrganizationSchema,
  type WebhookDeliverySchema,
  type WebhookEndpointSchema,
} from '../db';
import {
  DELIVERY_EVENT_UNIQUE,
  deliveredJson,
  deliveredOf,
  fanOutInsert,
  workflowIdParts,
  type DeliveredJson,
  type DeliveryEngine,
  type DeliveryRecords,
  type EventDelivery,
} from '../delivery';
import { apiError } from '../errors';
import {
  EVENT_NAME_PATTERN,
  MAX_EVENT_NAME_LENGTH,
  createDeliveryCounts,
  deliveryGrants,
  deliveryMonthOf,
  publishingOrganizations,
  subscribedEndpoints,
} from '../endpoints';

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
  /** An endpoint of the organization not sent the event: the one a platform event is about (it was just paused, say). */
  exceptEndpointId?: string;
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

/** The events table, and the tables the publish statement's parts read and write (their owners' parts). */
type Tables = InferKyselyDB<
  typeof EventSchema | typeof OrganizationSchema | typeof DeliveryUsageSchema | typeof WebhookEndpointSchema | typeof WebhookDeliverySchema
>;

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
    const { organizations, recorded, deliveries } = await this.record(tx, firsts, publisher, now).catch((error: unknown) => {
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
   * Runs publishStatement for the events whose organization exists. Returns the
   * organizations found, the events recorded now as stored (an event recorded before is left
   * as it is, and not among them) and their deliveries as stored. The statement writes
   * nothing while an organization that may send deliveries has no count for the month yet:
   * the counts are created, on their own, and the statement runs again.
   */
  private async record(
    tx: EntityManager,
    events: CheckedEvent[],
    publisher: string,
    now: Date,
  ): Promise<{ organizations: Set<string>; recorded: Map<string, Omit<PublishedEvent, 'deliveries'>>; deliveries: EventDelivery[] }> {
    const known = events.filter((e) => isUuid(e.organizationId));
    if (known.length === 0) return { organizations: new Set(), recorded: new Map(), deliveries: [] };
    const month = deliveryMonthOf(now);
    const workflowIds = known.map((e) => workflowIdParts(e.organizationId, e.eventId));
    const params: PublishParams = {
      organizationIds: [...new Set(known.map((e) => e.organizationId))],
      month,
      eventOrganizationIds: known.map((e) => e.organizationId),
      eventIds: known.map((e) => e.eventId),
      eventTypes: known.map((e) => e.eventType),
      payloads: known.map((e) => e.payloadJson),
      occurredAt: known.map((e) => e.occurredAt ?? now),
      bodies: known.map((e) => bodyOf(e, now)),
      workflowHeads: workflowIds.map((w) => w.workflowHead),
      workflowTails: workflowIds.map((w) => w.workflowTail),
      exceptEndpointIds: known.map((e) => e.exceptEndpointId ?? null),
      publisher,
      now,
    };
    for (let run = 1; ; run++) {
      const [row] = await publishStatement.execute(db(tx), params);
      const uncounted = (row!.organizations ?? []).filter(([, isUncounted]) => isUncounted).map(([id]) => id);
      if (uncounted.length > 0) {
        // Nothing was written: the month's counts are made, then the statement runs again.
        if (run === 2) throw new Error(`The delivery counts of ${uncounted.join(', ')} for ${month} neither exist nor can be created.`);
        await createDeliveryCounts(tx, uncounted, month);
        continue;
      }
      const recorded = (row!.recorded ?? []).map(([organization_id, event_id, event_type, publisher, skipped_reason, occurredAtMs, recordedAtMs]) =>
        eventOf({ organization_id, event_id, event_type, publisher, skipped_reason, occurredAtMs, recordedAtMs }, false),
      );
      return {
        organizations: new Set((row!.organizations ?? []).map(([id]) => id)),
        recorded: new Map(recorded.map((event) => [keyOf(event), event])),
        deliveries: inOrder(row!.deliveries ?? [], row!.urls ?? []),
      };
    }
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

const keyOf = (event: { organizationId: string; eventId: string }) => `${event.organizationId}/${event.eventId}`;

function uniqueEvents(events: { organizationId: string; eventId: string }[]): { organizationId: string; eventId: string }[] {
  return [...new Map(events.map((e) => [keyOf(e), { organizationId: e.organizationId, eventId: e.eventId }])).values()];
}

/** The recorded deliveries in the order of `urls` (the fan-out's), each with its endpoint's URL. */
function inOrder(deliveries: DeliveredJson[], urls: [string, string][]): EventDelivery[] {
  const byId = new Map(deliveries.map((values) => [values[0] as string, values]));
  return urls.map(([id, url]) => deliveredOf(byId.get(id)!, url));
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

interface PublishParams {
  organizationIds: string[];
  month: string;
  eventOrganizationIds: string[];
  eventIds: string[];
  eventTypes: string[];
  payloads: string[];
  occurredAt: Date[];
  /** The delivered body of each event (bodyOf). */
  bodies: string[];
  workflowHeads: string[];
  workflowTails: string[];
  exceptEndpointIds: (string | null)[];
  publisher: string;
  now: Date;
}

/** What publishStatement answers, as JSON arrays (one row, parsed at once, instead of a row per delivery). */
interface PublishRow {
  /** [id, the statement wrote nothing for want of the month's count] of each organization found. */
  organizations: [string, boolean][] | null;
  /** Each event recorded now, as stored: [organization id, event id, type, publisher, skipped reason, occurred at, recorded at (epoch ms)]. */
  recorded: [string, string, string, string, string | null, number, number][] | null;
  /** Each delivery recorded, as stored (deliveredJson), in no order. */
  deliveries: DeliveredJson[] | null;
  /** [id, endpoint URL] of each delivery recorded, each event's in order, oldest endpoint first. */
  urls: [string, string][] | null;
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

/** The events of a publish, as its statement's CTE `input`: one row each, `i` its position from 1. */
interface InputRow {
  organization_id: string;
  event_id: string;
  event_type: string;
  payload: string;
  occurred_at: Date;
  /** The delivered body (bodyOf). */
  body: string;
  workflow_head: string;
  workflow_tail: string;
  except_endpoint_id: string | null;
  i: number;
}

/**
 * A publish's one statement, compiled once: the events' insert is the events module's; the
 * organizations' plans, the subscription rule and the grant decision (quota) are the endpoints module's
 * parts (publishingOrganizations, subscribedEndpoints, deliveryGrants), the deliveries' insert
 * is delivery's (fanOutInsert). Each part names the CTEs it reads with their rows' types, so
 * this wiring compiles only if it hands each part what it reads.
 *
 * It records the events (those recorded before are left as they are) and, for each new
 * event of an organization whose plan includes deliveries, one delivery per subscribed
 * endpoint: pending as far as the month's quota counts them, in the order of the events and
 * oldest endpoint first, and failed with the quota's refusal beyond. It answers with the rows
 * it wrote, as stored. An organization that may send deliveries but has no count for the
 * month yet makes the statement write nothing (the count must exist to be locked); the
 * caller creates it and runs the statement again. Prepared: planning these CTEs at every
 * call cost PostgreSQL about a quarter of what a publish cost it.
 */
const publishStatement = new CompiledStatement(
  (k: Kysely<Tables>, p: PublishParams) => {
    const planned = publishingOrganizations(
      k.with('input', (w) =>
        w
          .selectFrom(
            sql<InputRow>`(select * from unnest(${p.eventOrganizationIds}::uuid[], ${p.eventIds}::text[], ${p.eventTypes}::text[], ${p.payloads}::text[],
                    ${p.occurredAt}::timestamptz[], ${p.bodies}::text[], ${p.workflowHeads}::text[], ${p.workflowTails}::text[],
                    ${p.exceptEndpointIds}::uuid[])
             with ordinality as v(organization_id, event_id, event_type, payload, occurred_at, body, workflow_head, workflow_tail, except_endpoint_id, i))`.as('v'),
          )
          .selectAll('v'),
      ),
      p.organizationIds,
      p.month,
    )
      .with('recorded', (w) =>
        w
          .insertInto('events')
          .columns(['id', 'organization_id', 'event_id', 'event_type', 'payload', 'occurred_at', 'publisher', 'skipped_reason', 'created_at'])
          .expression((eb) =>
            eb
              .selectFrom('input as v')
              .innerJoin('organization as o', 'o.id', 'v.organization_id')
              .select((s) => [
                sql<string>`gen_random_uuid()`.as('id'),
                'v.organization_id',
                'v.event_id',
                'v.event_type',
                sql<string>`${s.ref('v.payload')}::jsonb`.as('payload'),
                'v.occurred_at',
                sql<string>`${p.publisher}::text`.as('publisher'),
                sql<string | null>`case when ${s.ref('o.without_deliveries')} then ${PLAN_EXCLUDES_WEBHOOKS}::text end`.as('skipped_reason'),
                sql<Date>`${p.now}::timestamptz`.as('created_at'),
              ])
              .where((s) => s.not(s.exists(s.selectFrom('organization as u').select('u.id').where('u.uncounted', '=', true))))
              .orderBy('v.i'),
          )
          .onConflict((oc) => oc.columns(['organization_id', 'event_id']).doNothing())
          .returning(['organization_id', 'event_id', 'event_type', 'publisher', 'skipped_reason', epochMs('occurred_at').as('occurred_at_ms'), epochMs('created_at').as('created_at_ms')]),
      )
      .with('new_events', (w) =>
        w
          .selectFrom('input as v')
          .innerJoin('recorded as r', (join) => join.onRef('r.organization_id', '=', 'v.organization_id').onRef('r.event_id', '=', 'v.event_id'))
          .select(['v.organization_id', 'v.event_type', 'v.except_endpoint_id', 'v.i']),
      )
      .with('subscribed', (w) => subscribedEndpoints(w));
    return deliveryGrants(planned, p.month)
      .with('fan_out', (w) =>
        w
          .selectFrom('granted as g')
          .innerJoin('input as v', 'v.i', 'g.i')
          .select(['g.organization_id', 'g.endpoint_id', 'g.url', 'g.i', 'g.n', 'g.sendable', 'g.refusal', 'v.event_id', 'v.event_type', 'v.body', 'v.workflow_head', 'v.workflow_tail'])
          .select(sql<string>`gen_random_uuid()`.as('id')),
      )
      .with('delivered', (w) => fanOutInsert(w, p.now))
      .selectNoFrom((eb) => [
        eb
          .selectFrom('organization as o')
          .select((s) => sql<PublishRow['organizations']>`json_agg(json_build_array(${s.ref('o.id')}, ${s.ref('o.uncounted')}))`.as('organizations'))
          .as('organizations'),
        eb
          .selectFrom('recorded as r')
          .select((s) =>
            sql<PublishRow['recorded']>`json_agg(json_build_array(${sql.join([
              s.ref('r.organization_id'),
              s.ref('r.event_id'),
              s.ref('r.event_type'),
              s.ref('r.publisher'),
              s.ref('r.skipped_reason'),
              s.ref('r.occurred_at_ms'),
              s.ref('r.created_at_ms'),
            ])}))`.as('recorded'),
          )
          .as('recorded'),
        eb
          .selectFrom('delivered')
          .select((s) => sql<PublishRow['deliveries']>`json_agg(${deliveredJson(s)})`.as('deliveries'))
          .as('deliveries'),
        eb
          .selectFrom('fan_out as f')
          .select((s) => sql<PublishRow['urls']>`json_agg(json_build_array(${s.ref('f.id')}, ${s.ref('f.url')}) order by ${s.ref('f.i')}, ${s.ref('f.n')})`.as('urls'))
          .as('urls'),
      ]);
  },
  { prepare: true },
);

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
