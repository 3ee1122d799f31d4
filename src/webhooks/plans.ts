import type { EntityManager } from '../db/orm';
import type { Organization } from '../db';
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
  if (organization.plan === 'starter' || organization.plan === 'agency') {
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
