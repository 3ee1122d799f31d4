import { sql, type Expression, type RawBuilder } from 'kysely';
import type { EntityManager, Organization, Plan } from '../db';
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

/** The month of `now` as the quota counts it (deliveriesCountedThisMonth takes it). */
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
export function monthlyDeliveryLimitSql(plan: Expression<Plan>, monthlyDeliveryQuota: Expression<string | null>): RawBuilder<number> {
  const byPlan = Object.entries(MONTHLY_DELIVERIES).map(([name, limit]) => sql`when ${name}::text then ${sql.lit(limit)}`);
  return sql<number>`(case ${plan}::text ${sql.join(byPlan, sql` `)} when 'enterprise' then coalesce(${monthlyDeliveryQuota}, 0) else 0 end)::int8`;
}

/** quotaRefusalOf as SQL, for a limit computed by monthlyDeliveryLimitSql: the same text. */
export function quotaRefusalSql(limit: Expression<number>): RawBuilder<string> {
  return sql<string>`(${QUOTA_REFUSAL[0]}::text || ${limit}::text || ${QUOTA_REFUSAL[1]}::text)`;
}

/**
 * Deliveries counted against the organization's quota in `month` (deliveryMonthOf), as
 * last committed: SQL for the caller's statement (the organization id an expression of
 * it), no lock taken; null when the month has no count yet (createDeliveryCounts makes
 * it). Within a month the count only grows, so what it leaves is the most that the
 * statement's deliveryQuotaTakeSql can grant.
 */
export function deliveriesCountedThisMonth(organizationId: Expression<string>, month: string): RawBuilder<string | null> {
  return sql<string | null>`(select u.deliveries from delivery_usage u where u.organization_id = ${organizationId} and u.month = ${month}::date)`;
}

/**
 * The quota's part of a statement that records deliveries, as two CTEs to place in its
 * WITH list: it reads the caller's CTE `wanted(organization_id, wanted, monthly_limit)`
 * (deliveries to count, by organization, whose month has a count: createDeliveryCounts)
 * and defines `quota_granted(organization_id, granted)`, how many of them it counted (fewer
 * when the quota runs out). Each month's row is locked until the transaction of the
 * statement ends (at once, for a statement on its own), in organization order, so
 * concurrent publishes count one after another and never take more than the limit
 * together: `quota_locked` waits for a concurrent publish to commit and then reads the row
 * as it left it, and the update computes from that value.
 */
export function deliveryQuotaTakeSql(month: string): RawBuilder<unknown> {
  return sql`quota_locked as (
      select u.organization_id, u.deliveries
        from delivery_usage u
       where u.organization_id in (select w.organization_id from wanted w) and u.month = ${month}::date
       order by u.organization_id
         for update
    ), quota_granted as (
      update delivery_usage u set deliveries = greatest(l.deliveries, least(w.monthly_limit, l.deliveries + w.wanted))
        from quota_locked l
        join wanted w on w.organization_id = l.organization_id
       where u.organization_id = l.organization_id and u.month = ${month}::date
      returning u.organization_id, u.deliveries - l.deliveries as granted
    )`;
}

/**
 * Creates the month's count (0) of each organization that has none, so that a statement's
 * deliveryQuotaTakeSql can lock it. A count a concurrent transaction is creating is waited
 * for; once that one committed, it is left as it is.
 */
export async function createDeliveryCounts(em: EntityManager, organizationIds: string[], month: string): Promise<void> {
  if (organizationIds.length === 0) return;
  await sql`insert into delivery_usage (organization_id, month, deliveries)
    select o, ${month}::date, 0 from unnest(${organizationIds}::uuid[]) as o
    on conflict (organization_id, month) do nothing`.execute(em.getKysely());
}

/**
 * Counts one delivery against the month's quota, atomically: the conditional upsert
 * either takes a unit below the limit or takes nothing, whatever runs concurrently.
 * Called in the transaction that records the delivery, so a delivery counts once.
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
  const rows = limit <= 0 ? [] : await em.execute<{ deliveries: string }[]>(
    `insert into delivery_usage (organization_id, month, deliveries) values (?, ?, 1)
     on conflict (organization_id, month) do update set deliveries = delivery_usage.deliveries + 1
       where delivery_usage.deliveries < ?
     returning deliveries`,
    [organization.id, deliveryMonthOf(now), limit],
  );
  if (rows.length === 0) {
    const next = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
    throw apiError('DELIVERY_QUOTA_EXCEEDED', `The monthly quota of ${limit} webhook deliveries is used up.`, {
      metadata: { limit: String(limit) },
      headers: { 'retry-after': String(Math.ceil((next.getTime() - now.getTime()) / 1000)) },
    });
  }
}
