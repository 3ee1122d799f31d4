import { type EntityManager, isUniqueViolation, OrganizationSchema, UserSchema, PLANS, ROLES, type Organization, type Plan, type Role, type User } from '../db';

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

/**
 * The development organization has this id in every database, so that `npm run admin --
 * bootstrap` finds it again: a second bootstrap gives a new key for the same organization.
 */
export const DEVELOPMENT_ORGANIZATION_ID = '00000000-0000-4000-8000-00000000de01';
const DEVELOPMENT_OWNER_EMAIL = 'owner@development.example.com';

/** The development organization (plan scale) and its owner, made on first use. */
export async function developmentOrganization(em: EntityManager): Promise<{ organization: Organization; owner: User }> {
  const organization = await findOrMake(
    () => em.fork().findOne(OrganizationSchema, { id: DEVELOPMENT_ORGANIZATION_ID }),
    async (fresh) => {
      const made = fresh.create(OrganizationSchema, { id: DEVELOPMENT_ORGANIZATION_ID, name: 'Development', plan: 'scale' });
      await fresh.flush();
      return made;
    },
    em,
  );
  const owner = await findOrMake(
    () => em.fork().findOne(UserSchema, { organizationId: organization.id, email: DEVELOPMENT_OWNER_EMAIL }),
    (fresh) => createUser(fresh, { organizationId: organization.id, email: DEVELOPMENT_OWNER_EMAIL, role: 'owner' }),
    em,
  );
  return { organization, owner };
}

/** The row `find` finds, else the one `make` inserts; a concurrent call that inserted it first wins. */
async function findOrMake<T>(find: () => Promise<T | null>, make: (em: EntityManager) => Promise<T>, em: EntityManager): Promise<T> {
  const found = await find();
  if (found) return found;
  try {
    return await make(em.fork());
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    const other = await find();
    if (!other) throw error;
    return other;
  }
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
