import type { EntityManager, Organization } from '../db';
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

function monthOf(now: Date): string {
  return `${now.toISOString().slice(0, 7)}-01`;
}

/** Starter and agency include no webhook deliveries at all. */
export function planIncludesDeliveries(organization: Pick<Organization, 'plan'>): boolean {
  return organization.plan !== 'starter' && organization.plan !== 'agency';
}

/** Why a delivery over the monthly quota was not sent; stored as its last error. */
export function quotaRefusal(limit: number): string {
  return `The monthly quota of ${limit} webhook deliveries is used up (DELIVERY_QUOTA_EXCEEDED).`;
}

/**
 * Counts up to `wanted` deliveries against the month's quota and returns how many it
 * counted (fewer when the quota runs out). The first statement locks the month's row
 * until the caller's transaction ends, so concurrent publishes count one after another
 * and never take more than the limit together. Call it in the transaction that records
 * the deliveries, on a plan that includes them.
 */
export async function takeDeliveryQuotaUpTo(
  em: EntityManager,
  organization: Pick<Organization, 'id' | 'plan' | 'monthlyDeliveryQuota'>,
  now: Date,
  wanted: number,
): Promise<{ granted: number; limit: number }> {
  const limit = monthlyLimitOf(organization);
  if (wanted <= 0 || limit <= 0) return { granted: 0, limit };
  const month = monthOf(now);
  const [used] = await em.execute<{ deliveries: string }[]>(
    `insert into delivery_usage (organization_id, month, deliveries) values (?, ?, 0)
     on conflict (organization_id, month) do update set deliveries = delivery_usage.deliveries
     returning deliveries`,
    [organization.id, month],
  );
  const granted = Math.max(0, Math.min(wanted, limit - Number(used?.deliveries ?? 0)));
  if (granted > 0) {
    await em.execute('update delivery_usage set deliveries = deliveries + ? where organization_id = ? and month = ?', [granted, organization.id, month], 'run');
  }
  return { granted, limit };
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
    [organization.id, monthOf(now), limit],
  );
  if (rows.length === 0) {
    const next = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
    throw apiError('DELIVERY_QUOTA_EXCEEDED', `The monthly quota of ${limit} webhook deliveries is used up.`, {
      metadata: { limit: String(limit) },
      headers: { 'retry-after': String(Math.ceil((next.getTime() - now.getTime()) / 1000)) },
    });
  }
}
