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

/** Why a delivery over a monthly quota of `limit` was not sent; stored as its last error. */
function quotaRefusal(limit: number): string {
  return `The monthly quota of ${limit} webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).`;
}

/**
 * Deliveries counted against the organization's quota in `month` (deliveryMonthOf), as
 * last committed: SQL for the caller's statement (the organization id an expression of
 * it), no lock taken; the month is a value, so a statement compiled once can take it.
 * Within a month the count only grows, so what it leaves is the most that
 * takeDeliveryQuotaUpTo can grant later in the same transaction.
 */
export function deliveriesCountedThisMonth(organizationId: Expression<string>, month: string): RawBuilder<string | null> {
  return sql<string | null>`(select u.deliveries from delivery_usage u where u.organization_id = ${organizationId} and u.month = ${month}::date)`;
}

/** Deliveries the month's quota has left after `counted` (deliveriesCountedThisMonth); 0 on a plan without deliveries. */
export function deliveryQuotaLeft(organization: Pick<Organization, 'plan' | 'monthlyDeliveryQuota'>, counted: number): number {
  return planIncludesDeliveries(organization) ? Math.max(0, monthlyLimitOf(organization) - counted) : 0;
}

/** Why a delivery over the monthly quota of the organization was not sent; stored as its last error. */
export function quotaRefusalOf(organization: Pick<Organization, 'plan' | 'monthlyDeliveryQuota'>): string {
  return quotaRefusal(monthlyLimitOf(organization));
}

/**
 * Counts up to `wanted` deliveries against the month's quota, in one statement, and returns
 * how many it counted (fewer when the quota runs out). The statement locks the month's row
 * until the caller's transaction ends, so concurrent publishes count one after another and
 * never take more than the limit together: call it last, just before the commit, so the
 * lock is held for no more than that. Call it in the transaction that records the
 * deliveries, on a plan that includes them.
 */
export async function takeDeliveryQuotaUpTo(
  em: EntityManager,
  organization: Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'>,
  now: Date,
  wanted: number,
): Promise<{ granted: number; limit: number }> {
  const limit = monthlyLimitOf(organization);
  if (wanted <= 0 || limit <= 0) return { granted: 0, limit };
  const month = deliveryMonthOf(now);
  // `locked` waits for a concurrent publish to commit and then reads the row as it left it;
  // the update computes from that value. A month without a row yet is created with what it
  // grants; when a concurrent publish created it first, nothing is returned and the
  // statement runs again, then finding that committed row.
  for (let run = 1; ; run++) {
    const [row] = await em.execute<{ granted: string }[]>(
      `with locked as (
         select deliveries from delivery_usage where organization_id = ? and month = ? for update
       ), counted as (
         update delivery_usage u set deliveries = greatest(l.deliveries, least(?::bigint, l.deliveries + ?::bigint))
           from locked l
          where u.organization_id = ? and u.month = ?
         returning u.deliveries - l.deliveries as granted
       ), created as (
         insert into delivery_usage (organization_id, month, deliveries)
         select ?, ?, least(?::bigint, ?::bigint) where not exists (select 1 from locked)
         on conflict (organization_id, month) do nothing
         returning deliveries as granted
       )
       select granted from counted union all select granted from created`,
      [organization.id, month, limit, wanted, organization.id, month, organization.id, month, limit, wanted],
    );
    if (row) return { granted: Number(row.granted), limit };
    if (run === 2) throw new Error(`The delivery quota row of ${organization.id} for ${month} neither exists nor can be created.`);
  }
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
