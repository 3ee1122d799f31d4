import type { EntityManager } from './orm';

/**
 * The two PostgreSQL roles of the service. The owner owns the schema and runs the
 * migrations; the service connects as a role that owns nothing and may only insert into
 * and read `audit_events`, so the trail is kept by privilege, not only by its triggers
 * (which an owner may disable, and `session_replication_role`, a superuser setting, skips).
 * The migrations grant to the service role by this name.
 */
export const OWNER_ROLE = 'publishing_owner';
export const SERVICE_ROLE = 'publishing_service';

/** A connection that runs one SQL text: a pg Client or a PGlite database. */
export interface SqlRunner {
  query(sql: string): Promise<unknown>;
}

/**
 * Creates a role unless it exists. Roles are cluster-wide and several processes (test
 * runs, `npm start` next to the admin CLI) may create the same one at once: the loser of
 * that race sees duplicate_object, or unique_violation while the winner is uncommitted,
 * and both mean the role is there.
 */
export async function ensureRole(db: SqlRunner, name: string, options: { login: boolean }): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain role name: ${name}`);
  await db.query(`
do $$ begin
  create role ${name} ${options.login ? 'login' : 'nologin'} nosuperuser nocreatedb nocreaterole;
exception when duplicate_object or unique_violation then null;
end $$;`);
}

/** The owner and service roles, for the development default and the tests (trusted local logins, no passwords). */
export async function ensureServiceRoles(db: SqlRunner, options: { login: boolean }): Promise<void> {
  await ensureRole(db, OWNER_ROLE, options);
  await ensureRole(db, SERVICE_ROLE, options);
}

/**
 * What makes the connected role unfit to run the service: anything that would let it
 * rewrite the audit trail or switch its triggers off. Empty when it is fit.
 */
export async function serviceRoleProblems(em: EntityManager): Promise<string[]> {
  const [role] = await em.execute<{ name: string; superuser: boolean; owns: boolean; rewrites_audit: boolean }[]>(
    `select current_user as name,
            r.rolsuper as superuser,
            exists (select 1 from pg_class c
                     where c.relnamespace = 'public'::regnamespace and pg_has_role(current_user, c.relowner, 'USAGE')) as owns,
            has_table_privilege('audit_events', 'UPDATE') or has_table_privilege('audit_events', 'DELETE')
              or has_table_privilege('audit_events', 'TRUNCATE') as rewrites_audit
       from pg_roles r where r.rolname = current_user`,
  );
  if (!role) return ['the connected role is not in pg_roles'];
  const problems: string[] = [];
  if (role.superuser) problems.push(`${role.name} is a superuser`);
  if (role.owns) problems.push(`${role.name} owns tables of the schema (or is a member of their owner)`);
  if (role.rewrites_audit) problems.push(`${role.name} may update, delete or truncate audit_events`);
  return problems;
}
