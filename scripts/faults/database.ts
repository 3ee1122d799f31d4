/** The fault run's database on its own cluster: made as production makes it, read by the checks as the superuser. */
import { Client } from 'pg';
import { OWNER_ROLE, SERVICE_ROLE, ensureServiceRoles, migrateAs, openDatabase, databaseAt } from '../../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import type { OwnCluster } from './cluster';

/** The checks read as the superuser; the services connect as the service role. */
let databaseUrl = '';

/**
 * Creates the run's database with the owner and service roles and migrates it as the owner,
 * as production does; returns the environment the services connect with.
 */
export async function prepareDatabase(cluster: OwnCluster): Promise<Record<string, string>> {
  const admin = new Client({ connectionString: cluster.adminUrl });
  await admin.connect();
  try {
    await ensureServiceRoles(admin, { login: true });
    await admin.query(`create database publishing_faults owner ${OWNER_ROLE}`);
  } finally {
    await admin.end();
  }
  const asRole = (role: string) => `postgres://${role}@127.0.0.1:${cluster.port}/publishing_faults`;
  await migrateAs(databaseAt(asRole(OWNER_ROLE)));
  databaseUrl = asRole('postgres');
  return { DATABASE_URL: asRole(SERVICE_ROLE), DATABASE_MIGRATION_URL: asRole(OWNER_ROLE) };
}

export async function sql<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query(text, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/** An organization on the scale plan with an owner's key holding every scope. */
export async function newTenant(): Promise<{ org: { id: string }; key: string }> {
  const orm = await openDatabase(databaseAt(databaseUrl), { pool: { min: 0, max: 2 } });
  try {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Faults', plan: 'scale' });
    const user = await createUser(em, { organizationId: org.id, email: `owner-${org.id}@example.com`, role: 'owner' });
    return { org, key: (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'faults', scopes: [...PERMISSIONS] })).key };
  } finally {
    await orm.close();
  }
}
