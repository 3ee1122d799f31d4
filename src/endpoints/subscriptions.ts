import { sql, type QueryCreator } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { statementPart, statementParts, type DeliveryUsageSchema, type WebhookEndpointSchema } from '../db';
import { deliveryQuotaTake, quotaRefusalSql, type PublishingOrganizationRow, type QuotaTakeRows, type WantedDeliveriesRow } from './plans';

/**
 * The endpoints module's part of a statement that fans events out (the publisher's): which endpoints
 * an event goes to (the subscription rule), and which of those deliveries the month's quota
 * grants (the grant decision). The statement places both in its WITH list.
 */

type Tables = InferKyselyDB<typeof WebhookEndpointSchema | typeof DeliveryUsageSchema>;

/** An event to fan out, as the statement's CTE `new_events` holds it. */
export interface NewEventRow {
  organization_id: string;
  event_type: string;
  /** An endpoint of the organization not sent the event (the one a platform event is about). */
  except_endpoint_id: string | null;
  /** The event's position in the statement, from 1. */
  i: number;
}

/** A delivery the subscription rule wants: an event (`i`) to an endpoint, `n` its place in its organization's order. */
export interface SubscribedRow {
  organization_id: string;
  endpoint_id: string;
  url: string;
  i: number;
  /** From 1 per organization, in the order of the events and oldest endpoint first: the quota grants the first ones. */
  n: number;
}

/**
 * The subscription rule, as the CTE `subscribed`: each event of `new_events` goes to every
 * endpoint of its organization that is not disabled (a paused one too: it holds the
 * delivery) and names its type, but the one the event excepts; none when the organization's
 * plan includes no deliveries.
 */
export const subscribedEndpoints = statementPart((qc: QueryCreator<Tables & { new_events: NewEventRow; organization: PublishingOrganizationRow }>) =>
  qc
    .selectFrom('new_events as v')
    .innerJoin('organization as o', 'o.id', 'v.organization_id')
    .innerJoin('webhook_endpoints as e', (join) =>
      join
        .onRef('e.organization_id', '=', 'v.organization_id')
        .on('e.disabled_at', 'is', null)
        .on((eb) => sql<boolean>`${eb.ref('v.event_type')} = any(${eb.ref('e.event_names')})`)
        .on((eb) => sql<boolean>`${eb.ref('e.id')} is distinct from ${eb.ref('v.except_endpoint_id')}`),
    )
    .where('o.without_deliveries', '=', false)
    .select((eb) => [
      'v.organization_id',
      'e.id as endpoint_id',
      'e.url',
      'v.i',
      sql<number>`row_number() over (partition by ${eb.ref('v.organization_id')} order by ${eb.ref('v.i')}, ${eb.ref('e.created_at')}, ${eb.ref('e.id')})`.as('n'),
    ]),
);

/** A subscribed delivery with the grant decision: sent (pending) or refused with `refusal`. */
export interface GrantedRow extends SubscribedRow {
  sendable: boolean;
  /** Why it is not sent when it is not: the quota's refusal, the same text as quotaRefusalOf. */
  refusal: string;
}

/**
 * The grant decision, as the CTEs `wanted`, the quota's (deliveryQuotaTake) and `granted`:
 * of each organization with something left this month, the subscribed deliveries are
 * counted in their order (`n`) as far as the quota goes; those are sendable, the rest carry
 * the quota's refusal.
 */
export const deliveryGrants = statementParts<
  Tables & { subscribed: SubscribedRow; organization: PublishingOrganizationRow },
  { wanted: WantedDeliveriesRow; granted: GrantedRow } & QuotaTakeRows,
  [month: string]
>((qc, month) =>
  deliveryQuotaTake(
    qc.with('wanted', (w) =>
      w
        .selectFrom('subscribed as s')
        .innerJoin('organization as o', 'o.id', 's.organization_id')
        .where((eb) => eb('o.monthly_limit', '>', eb.ref('o.counted')))
        .groupBy(['s.organization_id', 'o.monthly_limit'])
        .select((eb) => ['s.organization_id', eb.fn.countAll<number>().as('wanted'), 'o.monthly_limit']),
    ),
    month,
  ).with('granted', (w) =>
    w
      .selectFrom('subscribed as s')
      .innerJoin('organization as o', 'o.id', 's.organization_id')
      .leftJoin('quota_granted as g', 'g.organization_id', 's.organization_id')
      .selectAll('s')
      .select((eb) => [
        sql<boolean>`${eb.ref('s.n')} <= coalesce(${eb.ref('g.granted')}, 0)`.as('sendable'),
        quotaRefusalSql(eb.ref('o.monthly_limit')).as('refusal'),
      ]),
  ),
);
