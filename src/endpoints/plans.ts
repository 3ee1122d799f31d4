import { sql, type Expression, type Kysely, type RawBuilder } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { CompiledStatement, statementParts, type DeliveryUsageSchema, type EntityManager, type Organization, type OrganizationSchema, type Plan } from '../db';
import { apiError } from '../errors';

/** Webhook deliveries per calendar month (UTC) by plan; Enterprise is set per organization. */
const MONTHLY_DELIVERIES: Record<Exclude<Organization['plan'], 'enterprise'>, number> = {
  starter: 0,
  agency: 0,
  scale: 100_000,
  command: 500_000,
};

function monthlyLimitOf(organization: Pick<Organization, 'plan' | 'monthlyDeliveryQuota'>): number {
  return organization.plan === 'enterprise' ? (organization.monthlyDeliveryQuota ?? 0) : MONTHLY_DELIVERIES[organization.plan];
}

/** The month of `now` as the quota counts it. */
export function deliveryMonthOf(now: Date): string {
  return `${now.toISOString().slice(0, 7)}-01`;
}

/** Plans that include no webhook deliveries at all. */
export const PLANS_WITHOUT_DELIVERIES: readonly Plan[] = ['starter', 'agency'];

export function planIncludesDeliveries(organization: Pick<Organization, 'plan'>): boolean {
  return !PLANS_WITHOUT_DELIVERIES.includes(organization.plan);
}

/** Why a delivery over a monthly quota was not sent, around the limit; stored as its last error. */
const QUOTA_REFUSAL = ['The monthly quota of ', ' webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).'] as const;

function quotaRefusal(limit: number): string {
  return `${QUOTA_REFUSAL[0]}${limit}${QUOTA_REFUSAL[1]}`;
}

/** Why a delivery over the monthly quota of the organization was not sent; stored as its last error. */
export function quotaRefusalOf(organization: Pick<Organization, 'plan' | 'monthlyDeliveryQuota'>): string {
  return quotaRefusal(monthlyLimitOf(organization));
}

/** The month's delivery limit of an organization as SQL, from its plan and its own quota (Enterprise). */
function monthlyDeliveryLimitSql(plan: Expression<Plan>, monthlyDeliveryQuota: Expression<number | null>): RawBuilder<number> {
  const byPlan = Object.entries(MONTHLY_DELIVERIES).map(([name, limit]) => sql`when ${name}::text then ${sql.lit(limit)}`);
  return sql<number>`(case ${plan}::text ${sql.join(byPlan, sql` `)} when 'enterprise' then coalesce(${monthlyDeliveryQuota}, 0) else 0 end)::int8`;
}

/** quotaRefusalOf as SQL, for a limit computed by monthlyDeliveryLimitSql: the same text. */
export function quotaRefusalSql(limit: Expression<number>): RawBuilder<string> {
  return sql<string>`(${QUOTA_REFUSAL[0]}::text || ${limit}::text || ${QUOTA_REFUSAL[1]}::text)`;
}

type UsageTables = InferKyselyDB<typeof DeliveryUsageSchema>;
type Tables = InferKyselyDB<typeof OrganizationSchema> & UsageTables;

/**
 * An organization that publishes, as a statement's CTE `organization`
 * (publishingOrganizations): its plan, the month's limit and what is counted of it.
 */
export interface PublishingOrganizationRow {
  id: string;
  plan: Plan;
  /** Deliveries counted this month, as last committed (no lock); null while the month has no count. */
  counted: number | null;
  monthly_limit: number;
  /** The plan includes no deliveries: its events are recorded with PLAN_EXCLUDES_WEBHOOKS and none. */
  without_deliveries: boolean;
  /** It may send deliveries but its month has no count yet: createDeliveryCounts must make one first. */
  uncounted: boolean;
}

/**
 * The organizations of `organizationIds` as the CTE `organization` (PublishingOrganizationRow),
 * for the month `month` (deliveryMonthOf). Within a month the count only grows, so what it
 * leaves is the most the statement's deliveryQuotaTake can grant.
 */
export const publishingOrganizations = statementParts<Tables, { organization_plan: Omit<PublishingOrganizationRow, 'uncounted'>; organization: PublishingOrganizationRow }, [organizationIds: string[], month: string]>(
  (qc, organizationIds, month) =>
    qc
      .with('organization_plan', (w) =>
        w
          .selectFrom('organizations as o')
          .select((eb) => [
            'o.id',
            'o.plan',
            sql<number | null>`(select u.deliveries from delivery_usage u where u.organization_id = ${eb.ref('o.id')} and u.month = ${month}::date)`.as('counted'),
            monthlyDeliveryLimitSql(eb.ref('o.plan'), eb.ref('o.monthly_delivery_quota')).as('monthly_limit'),
            sql<boolean>`${eb.ref('o.plan')}::text = any(${PLANS_WITHOUT_DELIVERIES}::text[])`.as('without_deliveries'),
          ])
          .where(sql<boolean>`o.id = any(${organizationIds}::uuid[])`),
      )
      .with('organization', (w) =>
        w
          .selectFrom('organization_plan as o')
          .selectAll('o')
          .select(sql<boolean>`o.counted is null and o.monthly_limit > 0 and not o.without_deliveries`.as('uncounted')),
      ),
);

/** Deliveries a statement wants counted, by organization, as its CTE `wanted`. */
export interface WantedDeliveriesRow {
  organization_id: string;
  wanted: number;
  /** The organization's limit for the month (its month has a count: createDeliveryCounts). */
  monthly_limit: number;
}

/** What deliveryQuotaTake adds to a statement: the counts it locked, and how many it counted of each `wanted`. */
export interface QuotaTakeRows {
  quota_locked: { organization_id: string; deliveries: number };
  quota_granted: { organization_id: string; granted: number };
}

/**
 * The quota's one algorithm, for every statement that records deliveries: it reads the
 * statement's CTE `wanted` and adds `quota_granted`, how many it counted of each
 * organization's (fewer when the quota runs out; none for an organization whose month has no
 * count yet, which createDeliveryCounts makes before the statement runs again). Each month's
 * row is locked until the statement's transaction ends (at once, for a statement on its
 * own), in organization order, so concurrent statements count one after another and never
 * take more than the limit together: `quota_locked` waits for a concurrent one to commit and
 * then reads the row as it left it, and the update computes from that value.
 */
export const deliveryQuotaTake = statementParts<UsageTables & { wanted: WantedDeliveriesRow }, QuotaTakeRows, [month: string]>((qc, month) =>
  qc
    .with('quota_locked', (w) =>
      w
        .selectFrom('delivery_usage as u')
        .select(['u.organization_id', 'u.deliveries'])
        .where('u.organization_id', 'in', (eb) => eb.selectFrom('wanted as w').select('w.organization_id'))
        .where(sql<boolean>`u.month = ${month}::date`)
        .orderBy('u.organization_id')
        .forUpdate(),
    )
    .with('quota_granted', (w) =>
      w
        .updateTable('delivery_usage as u')
        .from('quota_locked as l')
        .innerJoin('wanted as w', 'w.organization_id', 'l.organization_id')
        .set((eb) => ({
          deliveries: sql<number>`greatest(${eb.ref('l.deliveries')}, least(${eb.ref('w.monthly_limit')}, ${eb.ref('l.deliveries')} + ${eb.ref('w.wanted')}))`,
        }))
        .whereRef('u.organization_id', '=', 'l.organization_id')
        .where(sql<boolean>`u.month = ${month}::date`)
        .returning((eb) => ['u.organization_id', sql<number>`${eb.ref('u.deliveries')} - ${eb.ref('l.deliveries')}`.as('granted')]),
    ),
);

/**
 * Creates the month's count (0) of each organization that has none, so that a statement's
 * deliveryQuotaTake can lock it. A count a concurrent transaction is creating is waited
 * for; once that one committed, it is left as it is.
 */
export async function createDeliveryCounts(em: EntityManager, organizationIds: string[], month: string): Promise<void> {
  if (organizationIds.length === 0) return;
  await sql`insert into delivery_usage (organization_id, month, deliveries)
    select o, ${month}::date, 0 from unnest(${organizationIds}::uuid[]) as o
    on conflict (organization_id, month) do nothing`.execute(em.getKysely());
}

/** One delivery of one organization counted by deliveryQuotaTake: no row while the month has no count. */
const takeOne = new CompiledStatement((k: Kysely<UsageTables>, p: { organizationId: string; limit: number; month: string }) =>
  deliveryQuotaTake(
    k.with('wanted', (w) =>
      w.selectNoFrom([sql<string>`${p.organizationId}::uuid`.as('organization_id'), sql<number>`1::int8`.as('wanted'), sql<number>`${p.limit}::int8`.as('monthly_limit')]),
    ),
    p.month,
  )
    .selectFrom('quota_granted')
    .select('quota_granted.granted'),
);

/**
 * Counts one delivery against the month's quota, with the algorithm a publish counts by
 * (deliveryQuotaTake), or refuses it. Called in the transaction that records the delivery,
 * so a delivery counts once; the month's row stays locked until that transaction ends.
 */
export async function takeDeliveryQuota(
  em: EntityManager,
  organization: Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'>,
  now: Date,
): Promise<void> {
  if (!planIncludesDeliveries(organization)) {
    throw apiError('PLAN_EXCLUDES_WEBHOOKS', `The ${organization.plan} plan does not include webhook deliveries.`, {
      metadata: { plan: organization.plan },
    });
  }
  const limit = monthlyLimitOf(organization);
  const month = deliveryMonthOf(now);
  let granted = 0;
  if (limit > 0) {
    const take = () => takeOne.execute(em.getKysely<UsageTables>(), { organizationId: organization.id, limit, month });
    let rows = await take();
    if (rows.length === 0) {
      await createDeliveryCounts(em, [organization.id], month);
      rows = await take();
    }
    granted = Number(rows[0]?.granted ?? 0);
  }
  if (granted === 0) {
    const next = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
    throw apiError('DELIVERY_QUOTA_EXCEEDED', `The monthly quota of ${limit} webhook deliveries is used up.`, {
      metadata: { limit: String(limit) },
      headers: { 'retry-after': String(Math.ceil((next.getTime() - now.getTime()) / 1000)) },
    });
  }
}
