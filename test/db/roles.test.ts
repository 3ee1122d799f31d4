import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { ConfigError, loadConfig } from '../../src/config';
import { OWNER_ROLE, SERVICE_ROLE, ensureRole, openDatabase, serviceRoleProblems, databaseAt } from '../../src/db';
import { ADMIN_URL, createTestDatabase, type TestDatabase } from '../support/databases';

/**
 * The audit trail is kept by privilege: the service connects as a role that owns nothing
 * and may only insert into and read `audit_events`. Tables added by later migrations get
 * the service's grants through the owner's default privileges; these tests fail when a
 * table lacks what the service needs, or has more than it should.
 */

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

async function connectedAs<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const TABLE_PRIVILEGES = ['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'];
const READ_WRITE = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'];
/** What the service may do to each table; every table not named here needs READ_WRITE, and nothing more. */
const EXCEPTIONS: Record<string, string[]> = {
  audit_events: ['SELECT', 'INSERT'],
  schema_migrations: ['SELECT'],
};

/** Table name -> the privileges the service role holds on it, for every table of the schema. */
async function serviceTablePrivileges(client: Client): Promise<Record<string, string[]>> {
  const { rows } = await client.query<{ name: string; granted: string[] }>(
    `select c.relname as name, array(select p from unnest($1::text[]) p where has_table_privilege($2, c.oid, p)) as granted
       from pg_class c where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p') order by c.relname`,
    [TABLE_PRIVILEGES, SERVICE_ROLE],
  );
  return Object.fromEntries(rows.map((row) => [row.name, row.granted]));
}

describe("the service role's grants", () => {
  it('give every table what the service needs and no more: audit_events only SELECT and INSERT', async () => {
    const granted = await connectedAs(db.adminUrl, serviceTablePrivileges);
    expect(Object.keys(granted)).toEqual(expect.arrayContaining(['audit_events', 'connections', 'posts', 'rate_limits', 'webhook_deliveries']));
    const needed = Object.fromEntries(Object.keys(granted).map((table) => [table, EXCEPTIONS[table] ?? READ_WRITE]));
    expect(granted).toEqual(needed);
  });

  it('let the service use every sequence', async () => {
    const { rows } = await connectedAs(db.adminUrl, (client) =>
      client.query<{ name: string; usable: boolean }>(
        `select c.relname as name, has_sequence_privilege($1, c.oid, 'USAGE') as usable
           from pg_class c where c.relnamespace = 'public'::regnamespace and c.relkind = 'S'`,
        [SERVICE_ROLE],
      ),
    );
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.filter((row) => !row.usable)).toEqual([]);
  });

  it('reach a table a later migration creates, with no grant of its own', async () => {
    const granted = await connectedAs(db.ownerUrl, async (client) => {
      await client.query('begin');
      try {
        await client.query('create table later_feature (id bigint generated always as identity primary key, note text)');
        const { rows } = await client.query<{ sequence_usable: boolean }>(
          `select has_sequence_privilege($1, pg_get_serial_sequence('later_feature', 'id'), 'USAGE') as sequence_usable`,
          [SERVICE_ROLE],
        );
        return { tables: await serviceTablePrivileges(client), sequenceUsable: rows[0]?.sequence_usable };
      } finally {
        await client.query('rollback');
      }
    });
    expect(granted.tables.later_feature).toEqual(READ_WRITE);
    expect(granted.sequenceUsable).toBe(true);
  });
});

describe('the service role', () => {
  it('is neither superuser nor owner and cannot create tables, and the start check finds it fit', async () => {
    const [role] = await connectedAs(db.url, async (client) => {
      const { rows } = await client.query<{ name: string; superuser: boolean; owns: number; creates: boolean }>(
        `select current_user as name, r.rolsuper as superuser,
                (select count(*)::int from pg_class c where c.relnamespace = 'public'::regnamespace and c.relowner = r.oid) as owns,
                has_schema_privilege('public', 'CREATE') as creates
           from pg_roles r where r.rolname = current_user`,
      );
      await expect(client.query('create table intruder (id int)')).rejects.toMatchObject({ code: '42501' });
      return rows;
    });
    expect(role).toEqual({ name: SERVICE_ROLE, superuser: false, owns: 0, creates: false });
    const orm = await openDatabase(databaseAt(db.url), { pool: { min: 0, max: 1 } });
    try {
      expect(await serviceRoleProblems(orm.em.fork())).toEqual([]);
    } finally {
      await orm.close();
    }
  });

  it('may append to and read the audit trail, and nothing else of it', async () => {
    await connectedAs(db.url, async (client) => {
      await client.query(`insert into audit_events (action, outcome) values ('connection.start', 'succeeded')`);
      expect((await client.query('select outcome from audit_events')).rows).toEqual([{ outcome: 'succeeded' }]);
      for (const sql of ["update audit_events set outcome = 'failed'", 'delete from audit_events', 'truncate audit_events']) {
        await expect(client.query(sql)).rejects.toMatchObject({ code: '42501', message: 'permission denied for table audit_events' });
      }
      await expect(client.query('set session_replication_role = replica')).rejects.toMatchObject({ code: '42501' });
    });
  });

});

describe('the start check', () => {
  it.each([
    ['the owner', () => db.ownerUrl, [/owns tables/, /may update, delete or truncate audit_events/]],
    ['a superuser', () => db.adminUrl, [/is a superuser/, /owns tables/, /may update, delete or truncate audit_events/]],
  ])('finds %s unfit to run the service', async (_label, url, problems) => {
    const orm = await openDatabase(databaseAt(url()), { pool: { min: 0, max: 1 } });
    try {
      const found = await serviceRoleProblems(orm.em.fork());
      expect(found).toHaveLength(problems.length);
      problems.forEach((problem, i) => expect(found[i]).toMatch(problem));
    } finally {
      await orm.close();
    }
  });
});

describe('creating the roles', () => {
  it('settles concurrent creations of one role across sessions without an error', async () => {
    const name = `publishing_race_${randomBytes(4).toString('hex')}`;
    const sessions = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const client = new Client({ connectionString: ADMIN_URL });
        await client.connect();
        return client;
      }),
    );
    try {
      await Promise.all(sessions.map((client) => ensureRole(client, name, { login: false })));
      await ensureRole(sessions[0]!, name, { login: false });
      const { rows } = await sessions[0]!.query('select rolname, rolsuper, rolcanlogin from pg_roles where rolname = $1', [name]);
      expect(rows).toEqual([{ rolname: name, rolsuper: false, rolcanlogin: false }]);
    } finally {
      await sessions[0]!.query(`drop role if exists ${name}`);
      await Promise.all(sessions.map((client) => client.end()));
    }
  });

  it('leaves the owner and service roles as plain logins', async () => {
    const { rows } = await connectedAs(ADMIN_URL, (client) =>
      client.query('select rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin from pg_roles where rolname = any($1) order by rolname', [
        [OWNER_ROLE, SERVICE_ROLE],
      ]),
    );
    expect(rows).toEqual([
      { rolname: OWNER_ROLE, rolsuper: false, rolcreaterole: false, rolcreatedb: false, rolcanlogin: true },
      { rolname: SERVICE_ROLE, rolsuper: false, rolcreaterole: false, rolcreatedb: false, rolcanlogin: true },
    ]);
  });
});

describe('the configuration', () => {
  const PRODUCTION = {
    NODE_ENV: 'production',
    STATE_SIGNING_KEY: 's'.repeat(32),
    OPERATOR_TOKEN: 'o'.repeat(32),
    SECRET_ENCRYPTION_KEYS: `k1:${Buffer.alloc(32, 1).toString('base64')}`,
    COMPOSIO_API_KEY: 'ak_production',
    INTERNAL_SERVICE_TOKENS: `scheduler:${'i'.repeat(32)}`,
    DATABASE_URL: 'postgres://publishing_service:pw@db.internal:5432/publishing',
  };
  const problemsOf = (env: Record<string, string>): string[] => {
    try {
      loadConfig(env);
      return [];
    } catch (error) {
      if (error instanceof ConfigError) return error.problems;
      throw error;
    }
  };

  it('takes a migration URL of the owner next to the service URL, and none at all', () => {
    expect(problemsOf({ ...PRODUCTION, DATABASE_MIGRATION_URL: 'postgres://publishing_owner:pw@db.internal:5432/publishing' })).toEqual([]);
    expect(problemsOf(PRODUCTION)).toEqual([]);
  });

  it('refuses, in production, both URLs logging in as one role', () => {
    expect(problemsOf({ ...PRODUCTION, DATABASE_MIGRATION_URL: 'postgres://publishing_service:other@db.internal:5432/publishing' })).toEqual([
      'DATABASE_MIGRATION_URL must log in as the owner role and DATABASE_URL as the service role, not both as one',
    ]);
  });

  it('refuses a migration URL that is not a PostgreSQL URL', () => {
    expect(problemsOf({ NODE_ENV: 'test', DATABASE_MIGRATION_URL: 'mysql://root@db/publishing' })).toEqual(['DATABASE_MIGRATION_URL must be a postgres:// URL']);
  });
});
