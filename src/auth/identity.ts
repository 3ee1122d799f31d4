import { type EntityManager, OrganizationSchema, UserSchema, PLANS, ROLES, type Organization, type Plan, type Role, type User } from '../db';

export function isPlan(value: string): value is Plan {
  return (PLANS as readonly string[]).includes(value);
}

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

export async function createOrganization(em: EntityManager, input: { name: string; plan: Plan }): Promise<Organization> {
  const organization = em.create(OrganizationSchema, { name: input.name, plan: input.plan });
  await em.flush();
  return organization;
}

export async function createUser(
  em: EntityManager,
  input: { organizationId: string; email: string; role: Role },
): Promise<User> {
  const user = em.create(UserSchema, { organizationId: input.organizationId, email: input.email.toLowerCase(), role: input.role });
  await em.flush();
  return user;
}

/** Sets an organization's monthly delivery quota (an operator's decision, enterprise plans only: the caller checks the plan). */
export async function setMonthlyDeliveryQuota(em: EntityManager, organization: Organization, monthlyDeliveries: number): Promise<void> {
  organization.monthlyDeliveryQuota = monthlyDeliveries;
  await em.flush();
}
