import net from 'node:net';
import path from 'node:path';
import { Client } from 'pg';
import type { Logger } from '../config/logger';
import { POOL_SIZE } from './orm';
import { OWNER_ROLE, SERVICE_ROLE, ensureServiceRoles } from './roles';

export interface ResolvedDatabase {
  /** Where the service connects: as the service role when the development default set the roles up. */
  url: string;
  /** Where migrations run (as the owner role); DATABASE_MIGRATION_URL, when set, goes before it. */
  migrationUrl: string;
  /** Pool size the database can take (the embedded server serves a few connections only). */
  poolMax: number;
  /** True for the embedded PGlite server: one session behind every connection. */
  embedded: boolean;
  /** Stops what was started for the database (the embedded server), if anything. */
  stop(): Promise<void>;
}

const LOCAL = { host: '127.0.0.1', port: 5432 };
const DEV_DATABASE = 'publishing_dev';

function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    socket.setTimeout(500);
    const settle = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => settle(true));
    socket.once('timeout', () => settle(false));
    socket.once('error', () => settle(false));
  });
}

/**
 * DATABASE_URL when set. Otherwise (development only) a local PostgreSQL on
 * 127.0.0.1:5432 if one answers, with its own database; else embedded PGlite served
 * over the Postgres wire protocol from `.data/pglite`, which is single-writer and meant
 * for trying the service out, not for load.
 */
export async function resolveDatabaseUrl(
  configured: string,
  logger: Logger,
  dataDir = '.data',
  local: { host: string; port: number } = LOCAL,
): Promise<ResolvedDatabase> {
  if (configured) {
    logger.info({ database: redact(configured) }, 'using DATABASE_URL');
    return { url: configured, migrationUrl: configured, poolMax: POOL_SIZE, embedded: false, stop: async () => undefined };
  }
  if (await answers(local.host, local.port)) {
    const admin = new Client({ host: local.host, port: local.port, user: 'postgres', database: 'postgres' });
    try {
      await admin.connect();
      await ensureServiceRoles(admin, { login: true });
      const exists = await admin.query<{ owner: string }>('select pg_get_userbyid(datdba) as owner from pg_database where datname = $1', [DEV_DATABASE]);
      if (exists.rowCount === 0) await admin.query(`create database ${DEV_DATABASE} owner ${OWNER_ROLE}`);
      const roleUrl = (role: string) => `postgres://${role}@${local.host}:${local.port}/${DEV_DATABASE}`;
      if (exists.rows[0] && exists.rows[0].owner !== OWNER_ROLE) {
        // Its tables belong to whoever created it, and the bootstrap superuser's cannot be handed over.
        logger.warn({ database: DEV_DATABASE, owner: exists.rows[0].owner }, 'this database predates the owner and service roles and runs as its owner; drop it to have them');
        const url = roleUrl(exists.rows[0].owner);
        return { url, migrationUrl: url, poolMax: POOL_SIZE, embedded: false, stop: async () => undefined };
      }
      const url = roleUrl(SERVICE_ROLE);
      logger.info({ database: url }, 'no DATABASE_URL: using the local PostgreSQL');
      return { url, migrationUrl: roleUrl(OWNER_ROLE), poolMax: POOL_SIZE, embedded: false, stop: async () => undefined };
    } catch (error) {
      logger.warn({ err: error }, 'local PostgreSQL answered but could not be used; falling back to embedded PGlite');
    } finally {
      await admin.end().catch(() => undefined);
    }
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
  const db = await PGlite.create(path.resolve(dataDir, 'pglite'));
  // PGlite has one user, so the split cannot hold here; the roles exist for the migrations' grants.
  await ensureServiceRoles(db, { login: false });
  const maxConnections = 4;
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections });
  await server.start();
  const url = `postgres://postgres@${server.getServerConn()}/postgres`;
  logger.info({ database: url, dataDir }, 'no DATABASE_URL and no local PostgreSQL: using embedded PGlite');
  return {
    url,
    migrationUrl: url,
    poolMax: maxConnections,
    embedded: true,
    stop: async () => {
      await server.stop();
      await db.close();
    },
  };
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}
