import { sql, type Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import {
  CompiledStatement,
  epochMs,
  isUuid,
  type DeliveryUsageSchema,
  type EntityManager,
  type EventSchema,
  type OrganizationSchema,
  type WebhookDeliverySchema,
  type WebhookEndpointSchema,
} from '../db';
import { deliveredJson, deliveredOf, fanOutInsert, workflowIdParts, type DeliveredJson, type EventDelivery } from '../delivery';
import { createDeliveryCounts, deliveryGrants, deliveryMonthOf, publishingOrganizations, subscribedEndpoints } from '../endpoints';
import { bodyOf, type CheckedEvent, type PublishedEvent } from './event';

export const PLAN_EXCLUDES_WEBHOOKS = 'PLAN_EXCLUDES_WEBHOOKS';

/** The events table, and the tables the publish statement's parts read and write (their owners' parts). */
type Tables = InferKyselyDB<
  typeof EventSchema | typeof OrganizationSchema | typeof DeliveryUsageSchema | typeof WebhookEndpointSchema | typeof WebhookDeliverySchema
>;

export const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

export const keyOf = (event: { organizationId: string; eventId: string }) => `${event.organizationId}/${event.eventId}`;

/**
 * Runs publishStatement for the events whose organization exists. Returns the
 * organizations found, the events recorded now as stored (an event recorded before is left
 * as it is, and not among them) and their deliveries as stored. The statement writes
 * nothing while an organization that may send deliveries has no count for the month yet:
 * the counts are created, on their own, and the statement runs again.
 */
export async function recordEvents(
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

/** The recorded deliveries in the order of `urls` (the fan-out's), each with its endpoint's URL. */
function inOrder(deliveries: DeliveredJson[], urls: [string, string][]): EventDelivery[] {
  const byId = new Map(deliveries.map((values) => [values[0] as string, values]));
  return urls.map(([id, url]) => deliveredOf(byId.get(id)!, url));
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

export function eventColumns(k: Kysely<Tables>) {
  return k
    .selectFrom('events')
    .select(['organization_id', 'event_id', 'event_type', 'publisher', 'skipped_reason', epochMs('occurred_at').as('occurredAtMs'), epochMs('created_at').as('recordedAtMs')]);
}

export interface EventRow {
  organization_id: string;
  event_id: string;
  event_type: string;
  publisher: string;
  skipped_reason: string | null;
  occurredAtMs: number;
  recordedAtMs: number;
}

export function eventOf(row: EventRow, replayed: boolean): Omit<PublishedEvent, 'deliveries'> {
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

