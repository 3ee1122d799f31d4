import { loadConfig, type Config } from '../../src/config';
import { createLogger, type Logger } from '../../src/config/logger';
import type { Options } from '@mikro-orm/postgresql';
import { openDatabase, type MikroORM } from '../../src/db';
import { start, type App } from '../../src/server';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import type { Plan, Role } from '../../src/db';
import { createTestDatabase } from './databases';

export interface TestApp {
  app: App;
  orm: MikroORM;
  config: Config;
  url: string;
  /** The app's database as the service role, which the app connects as. */
  databaseUrl: string;
  /** The same database as the owner role and as the administrator (null when reusing a database). */
  ownerDatabaseUrl: string | null;
  adminDatabaseUrl: string | null;
  /** An organization with a user of the given role and a key with the given scopes. */
  tenant(options?: { plan?: Plan; role?: Role; scopes?: string[] }): Promise<Tenant>;
  close(): Promise<void>;
}

export interface Tenant {
  organizationId: string;
  userId: string;
  keyId: string;
  apiKey: string;
  /** Another user of the same organization, with its own key. */
  colleague(role: Role, scopes?: string[]): Promise<{ userId: string; keyId: string; apiKey: string }>;
}

export const TEST_ENV: Record<string, string> = {
  NODE_ENV: 'test',
  PORT: '0',
  HOST: '127.0.0.1',
  DELIVERY_ALLOW_CIDRS: '127.0.0.0/8,::1/128',
};

/** A real listener on a free port over a database of its own. */
export async function startTestApp(
  env: Record<string, string> = {},
  options: {
    now?: () => number;
    /** Reuse this database (kept on close) instead of a fresh one. */
    databaseUrl?: string;
    /** More ORM options (a pool hook that watches the statements sent, say). */
    orm?: Partial<Options>;
    /** Where the service logs (silent unless TEST_LOG_LEVEL says otherwise). */
    logger?: Logger;
  } = {},
): Promise<TestApp> {
  const database = options.databaseUrl
    ? { url: options.databaseUrl, ownerUrl: null, adminUrl: null, drop: async () => undefined }
    : await createTestDatabase();
  const config = loadConfig({ ...TEST_ENV, DATABASE_URL: database.url, ...env });
  const orm = await openDatabase(database.url, options.orm);
  const app = await start({ config, orm, logger: options.logger ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'), now: options.now });
  return {
    app,
    orm,
    config,
    url: app.url,
    databaseUrl: database.url,
    ownerDatabaseUrl: database.ownerUrl,
    adminDatabaseUrl: database.adminUrl,
    async tenant(options = {}) {
      const em = orm.em.fork();
      const org = await createOrganization(em, { name: 'Test Org', plan: options.plan ?? 'scale' });
      const member = async (role: Role, scopes: string[] = [...PERMISSIONS]) => {
        const user = await createUser(em, { organizationId: org.id, email: `${role}-${Math.random().toString(36).slice(2)}@example.com`, role });
        const key = await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'test', scopes });
        return { userId: user.id, keyId: key.id, apiKey: key.key };
      };
      const owner = await member(options.role ?? 'owner', options.scopes);
      return { organizationId: org.id, ...owner, colleague: member };
    },
    async close() {
      await app.close();
      await orm.close();
      await database.drop();
    },
  };
}
