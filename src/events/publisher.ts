import { randomUUID } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { JsonObject } from '@bufbuild/protobuf';
import type { Logger } from '../config';
import { isUuid, type EntityManager, type EventSchema, type Organization, type OrganizationSchema } from '../db';
import type { DeliveryEngine, DeliveryRecords, EventDelivery } from '../delivery';
import { apiError } from '../errors';
import { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH, planIncludesDeliveries, quotaRefusal, takeDeliveryQuotaUpTo } from '../webhooks';

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

type Tables = InferKyselyDB<typeof EventSchema | typeof OrganizationSchema>;

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
   * writing anything; a refusal names the event by its index. The deliveries are due at
   * once (the embedded engine finds them by polling); call startDeliveries after the
   * commit so that Temporal starts them without waiting for the pending sweep.
   */
  async publishEvents(tx: EntityManager, events: NewEvent[], publisher: string): Promise<PublishedEvent[]> {
    const checked = events.map(checkEvent);
    const organizations = await this.organizations(tx, checked);
    const published: PublishedEvent[] = [];
    for (const [index, event] of checked.entries()) {
      published.push(await this.record(tx, event, organizations.get(event.organizationId)!, publisher, index));
    }
    return published;
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
    return { ...eventOf(row, false), deliveries: await this.deps.deliveries.listByEvent(em, organizationId, eventId) };
  }

  private async organizations(tx: EntityManager, events: CheckedEvent[]): Promise<Map<string, Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'>>> {
    const ids = [...new Set(events.map((e) => e.organizationId).filter(isUuid))];
    const rows = ids.length === 0 ? [] : await db(tx).selectFrom('organizations').select(['id', 'plan', 'monthly_delivery_quota']).where('id', 'in', ids).execute();
    const found = new Map(rows.map((r) => [r.id, { id: r.id, plan: r.plan, monthlyDeliveryQuota: r.monthly_delivery_quota === null ? null : Number(r.monthly_delivery_quota) }]));
    events.forEach((event, index) => {
      if (!found.has(event.organizationId)) {
        throw apiError('ORGANIZATION_NOT_FOUND', `No organization ${event.organizationId.slice(0, 64)}.`, { metadata: { index: String(index) } });
      }
    });
    return found;
  }

  /** One event: a constant number of statements, however many endpoints subscribe. */
  private async record(
    tx: EntityManager,
    event: CheckedEvent,
    organization: Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'>,
    publisher: string,
    index: number,
  ): Promise<PublishedEvent> {
    const k = db(tx);
    const now = new Date(this.deps.now());
    const occurredAt = event.occurredAt ?? now;
    const skippedReason = planIncludesDeliveries(organization) ? null : PLAN_EXCLUDES_WEBHOOKS;
    const inserted = await k
      .insertInto('events')
      .values({
        id: randomUUID(),
        organization_id: event.organizationId,
        event_id: event.eventId,
        event_type: event.eventType,
        payload: sql`${event.payloadJson}::jsonb`,
        occurred_at: occurredAt,
        publisher,
        skipped_reason: skippedReason,
        created_at: now,
      })
      .onConflict((oc) => oc.columns(['organization_id', 'event_id']).doNothing())
      .returning('id')
      .executeTakeFirst();

    if (!inserted) {
      const existing = await eventColumns(k)
        .select(sql<boolean>`payload = ${event.payloadJson}::jsonb`.as('samePayload'))
        .where('organization_id', '=', event.organizationId)
        .where('event_id', '=', event.eventId)
        .executeTakeFirstOrThrow();
      if (existing.event_type !== event.eventType || !existing.samePayload) {
        throw apiError('EVENT_CONFLICT', `Event ${event.eventId} was published before with another type or payload.`, {
          metadata: { index: String(index), eventId: event.eventId },
        });
      }
      return { ...eventOf(existing, true), deliveries: await this.deps.deliveries.listByEvent(tx, event.organizationId, event.eventId) };
    }

    if (skippedReason === null) {
      const wanted = await this.deps.deliveries.subscriberCount(tx, event.organizationId, event.eventType);
      const { granted, limit } = await takeDeliveryQuotaUpTo(tx, organization, now, wanted);
      const body = JSON.stringify({ id: event.eventId, type: event.eventType, createdAt: occurredAt.toISOString(), data: event.payload });
      await this.deps.deliveries.recordForSubscribers(
        tx,
        { organizationId: event.organizationId, eventId: event.eventId, eventType: event.eventType, payload: body },
        { sendable: granted, refusal: quotaRefusal(limit) },
      );
    }
    return {
      organizationId: event.organizationId,
      eventId: event.eventId,
      eventType: event.eventType,
      occurredAt,
      recordedAt: now,
      publisher,
      skippedReason,
      replayed: false,
      deliveries: skippedReason === null ? await this.deps.deliveries.listByEvent(tx, event.organizationId, event.eventId) : [],
    };
  }
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

function eventColumns(k: Kysely<Tables>) {
  return k
    .selectFrom('events')
    .select([
      'organization_id',
      'event_id',
      'event_type',
      'publisher',
      'skipped_reason',
      sql<number>`floor(extract(epoch from occurred_at) * 1000)::float8`.as('occurredAtMs'),
      sql<number>`floor(extract(epoch from created_at) * 1000)::float8`.as('recordedAtMs'),
    ]);
}

function eventOf(
  row: { organization_id: string; event_id: string; event_type: string; publisher: string; skipped_reason: string | null; occurredAtMs: number; recordedAtMs: number },
  replayed: boolean,
): Omit<PublishedEvent, 'deliveries'> {
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
