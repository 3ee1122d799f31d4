import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { OWNER_ROLE, SERVICE_ROLE } from '../../src/db/roles';

/**
 * Every test file gets its own PostgreSQL database, cloned from a template that global
 * setup migrated once per run as the owner role, so suites run in parallel without seeing
 * each other's rows. The app connects as the service role, as in production.
 */
export const ADMIN_URL = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const TEMPLATE_ENV = 'PUBLISHING_TEST_TEMPLATE_DB';

/** Where the suites of this run share the workflow bundles they replay histories against. */
export function workflowBundleDir(): string {
  const template = process.env[TEMPLATE_ENV];
  if (!template) throw new Error(`${TEMPLATE_ENV} is not set: run the suites through jest (global setup names the run)`);
  return path.join(os.tmpdir(), `${template}-workflow-bundles`);
}

/** The database `name`, logged in as `role` (default: the administrator of ADMIN_URL). */
export function databaseUrl(name: string, role?: string): string {
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  if (role) {
    url.username = role;
    url.password = '';
  }
  return url.toString();
}

/** Runs `fn` on a client of its own at `connectionString`, closed whatever happens. */
export async function withClient<T>(connectionString: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export function withAdmin<T>(fn: (client: Client) => Promise<T>): Promise<T> {
  return withClient(ADMIN_URL, fn);
}

export interface TestDatabase {
  name: string;
  /** As the service role: what the app connects with. */
  url: string;
  /** As the owner role: what migrations run as. */
  ownerUrl: string;
  /** As the administrator (a superuser), for what no role of the service may do. */
  adminUrl: string;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const template = process.env[TEMPLATE_ENV];
  if (!template) throw new Error(`${TEMPLATE_ENV} is not set: run the suites through jest (global setup migrates the template)`);
  const name = `publishing_test_${randomBytes(6).toString('hex')}`;
  await withAdmin(async (client) => {
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query(`create database ${name} owner ${OWNER_ROLE} template ${template}`);
        return;
      } catch (error) {
        // Two clones of one template at the same instant can collide; a retry settles it.
        if (attempt >= 5 || !/being accessed by other users/.test(String(error))) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      }
    }
  });
  return {
    name,
    url: databaseUrl(name, SERVICE_ROLE),
    ownerUrl: databaseUrl(name, OWNER_ROLE),
    adminUrl: databaseUrl(name),
    drop: () => withAdmin(async (client) => void (await client.query(`drop database if exists ${name} with (force)`))),
  };
}
