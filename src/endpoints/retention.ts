import { sql, type RawBuilder } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { statementParts, type Organization, type OrganizationSchema, type Plan } from '../db';

/**
 * How long an organization's delivery data is kept, by plan: the one table the README's
 * "Retention and erasure" shows. Payloads (the body as signed and sent) go first; an attempt
 * row (times, status, error, the receiver's answer excerpt) stays longer, for the delivery
 * log; a finished recovery job as long. The delivery row itself (status, counts, ids) and
 * the month's counts are kept: the audit and billing read them. Payloads outlive the
 * longest recovery window (14 days) on every plan that sends deliveries.
 */
export interface RetentionPeriods {
  payloadDays: number;
  attemptDays: number;
  recoveryJobDays: number;
}

export const RETENTION_BY_PLAN: Record<Plan, RetentionPeriods> = {
  // Without deliveries of their own: what is left from an earlier plan goes soon.
  starter: { payloadDays: 7, attemptDays: 30, recoveryJobDays: 30 },
  agency: { payloadDays: 7, attemptDays: 30, recoveryJobDays: 30 },
  scale: { payloadDays: 30, attemptDays: 90, recoveryJobDays: 90 },
  command: { payloadDays: 60, attemptDays: 180, recoveryJobDays: 180 },
  enterprise: { payloadDays: 90, attemptDays: 365, recoveryJobDays: 365 },
};

const DAY_MS = 24 * 60 * 60 * 1000;

/** The oldest instant whose payloads an organization of this plan still keeps, at `now`. */
export function payloadHorizonOf(organization: Pick<Organization, 'plan'>, now: number): Date {
  return new Date(now - RETENTION_BY_PLAN[organization.plan].payloadDays * DAY_MS);
}

/** Each organization's horizons, as the CTE `retention`: what was recorded (or started, or finished) before them is past retention. */
export interface RetentionRow {
  organization_id: string;
  payload_before: Date;
  attempts_before: Date;
  recovery_jobs_before: Date;
}

/** The shortest of each period over every plan: nothing younger is past retention on any plan. */
export function youngestHorizons(now: Date): { payloadBefore: Date; attemptsBefore: Date; recoveryJobsBefore: Date } {
  const periods = Object.values(RETENTION_BY_PLAN);
  const before = (days: number) => new Date(now.getTime() - days * DAY_MS);
  return {
    payloadBefore: before(Math.min(...periods.map((p) => p.payloadDays))),
    attemptsBefore: before(Math.min(...periods.map((p) => p.attemptDays))),
    recoveryJobsBefore: before(Math.min(...periods.map((p) => p.recoveryJobDays))),
  };
}

function daysOf(plan: RawBuilder<unknown>, period: keyof RetentionPeriods): RawBuilder<number> {
  const byPlan = Object.entries(RETENTION_BY_PLAN).map(([name, periods]) => sql`when ${sql.lit(name)} then ${sql.lit(periods[period])}`);
  return sql<number>`(case ${plan}::text ${sql.join(byPlan, sql` `)} end)`;
}

type Tables = InferKyselyDB<typeof OrganizationSchema>;

/**
 * Every organization's retention horizons at `now` as the CTE `retention` (RetentionRow),
 * for the statements of the retention sweep that the owners of the delivery data write.
 */
export const organizationRetention = statementParts<Tables, { retention: RetentionRow }, [now: Date]>((qc, now) =>
  qc.with('retention', (w) =>
    w.selectFrom('organizations as o').select((eb) => {
      const plan = sql`${eb.ref('o.plan')}`;
      const before = (period: keyof RetentionPeriods) => sql<Date>`${now}::timestamptz - ${daysOf(plan, period)} * interval '1 day'`;
      return ['o.id as organization_id', before('payloadDays').as('payload_before'), before('attemptDays').as('attempts_before'), before('recoveryJobDays').as('recovery_jobs_before')];
    }),
  ),
);
