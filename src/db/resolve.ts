import { mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import type { Logger } from '../config';
import { servePGlite } from './embedded-server';
import { databaseAt, type Database } from './orm';
import { OWNER_ROLE, SERVICE_ROLE, ensureServiceRoles } from './roles';

/** The embedded server at `url`: one session behind every connection. */
function embeddedAt(url: string, poolMax: number, stop: () => Promise<void> = async () => undefined): Database {
  return { url, migrationUrl: url, poolMax, embedded: true, stop };
}

/**
 * What a process does when another one already holds the embedded database. The service
 * must hold it itself: its API, its delivery engine and every other process depend on it
 * for as long as it runs. A CLI borrows the running service's server for one command.
 */
export type EmbeddedAccess = 'own' | 'join';

export interface ResolveOptions {
  dataDir?: string;
  local?: { host: string; port: number };
  embedded?: EmbeddedAccess;
  /** How long a joining process waits for an owner that is still starting. */
  ownerStartTimeoutMs?: number;
}

const LOCAL = { host: '127.0.0.1', port: 5432 };
const DEV_DATABASE = 'publishing_dev';
/** Every connection shares the one PGlite session (taking turns by exchange), so more sockets cost nothing but a file descriptor each. */
const EMBEDDED_MAX_CONNECTIONS = 32;
const OWNER_POOL_MAX = 4;
const JOINER_POOL_MAX = 2;

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
 * over the Postgres wire protocol from `<dataDir>/pglite`, which is single-writer and
 * meant for trying the service out, not for load.
 *
 * One process at a time opens the PGlite directory: two copies of one database on disk
 * would each see only their own writes. The owner records its pid and its server's
 * address in `<dataDir>/pglite.lock`; another process reads it and connects to that
 * server (`join`), or refuses with the owner's pid (`own`).
 */
export async function resolveDatabaseUrl(configured: string, logger: Logger, options: ResolveOptions = {}): Promise<Database> {
  const { dataDir = '.data', local = LOCAL, embedded = 'join', ownerStartTimeoutMs = 60_000 } = options;
  if (configured) {
    logger.info({ database: redact(configured) }, 'using DATABASE_URL');
    return databaseAt(configured);
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
        return databaseAt(url);
      }
      const url = roleUrl(SERVICE_ROLE);
      logger.info({ database: url }, 'no DATABASE_URL: using the local PostgreSQL');
      return databaseAt(url, roleUrl(OWNER_ROLE));
    } catch (error) {
      logger.warn({ err: error }, 'local PostgreSQL answered but could not be used; falling back to embedded PGlite');
    } finally {
      await admin.end().catch(() => undefined);
    }
  }
  return embeddedDatabase(path.resolve(dataDir), logger, embedded, ownerStartTimeoutMs);
}

interface OwnerRecord {
  pid: number;
  /** host:port of the owner's server; absent while the owner is still starting it. */
  address?: string;
}

export class EmbeddedDatabaseBusyError extends Error {}

async function embeddedDatabase(dataDir: string, logger: Logger, access: EmbeddedAccess, ownerStartTimeoutMs: number): Promise<Database> {
  mkdirSync(dataDir, { recursive: true });
  const lockPath = path.join(dataDir, 'pglite.lock');
  const deadline = Date.now() + ownerStartTimeoutMs;
  for (;;) {
    const owner = claimOrReadOwner(lockPath);
    if (owner === 'claimed') return serveEmbedded(dataDir, lockPath, logger);
    if (access === 'own') {
      throw new EmbeddedDatabaseBusyError(
        `the embedded database in ${path.join(dataDir, 'pglite')} is in use by process ${owner.pid}; ` +
          'stop that process first, or set DATABASE_URL to a PostgreSQL',
      );
    }
    if (owner.address) return joinEmbedded(owner as Required<OwnerRecord>, lockPath, logger);
    if (Date.now() > deadline) {
      throw new EmbeddedDatabaseBusyError(`process ${owner.pid} holds ${lockPath} but has not started the embedded database server`);
    }
    await sleep(100);
  }
}

/** Takes the lock file if no live process holds it; otherwise says who does. */
function claimOrReadOwner(lockPath: string): 'claimed' | OwnerRecord {
  for (;;) {
    try {
      writeFileSync(lockPath, JSON.stringify({ pid: process.pid } satisfies OwnerRecord), { flag: 'wx' });
      return 'claimed';
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const raw = readLock(lockPath);
    if (raw === undefined) continue;
    const owner = parseOwner(raw);
    if (owner && isAlive(owner.pid)) return owner;
    // The owner died without removing its lock (SIGKILL, a crash). Another process may have
    // cleared it and claimed it since the read, so only the very record read goes.
    if (readLock(lockPath) === raw) unlinkQuietly(lockPath);
  }
}

function readLock(lockPath: string): string | undefined {
  try {
    return readFileSync(lockPath, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function parseOwner(raw: string): OwnerRecord | undefined {
  try {
    const value = JSON.parse(raw) as Partial<OwnerRecord>;
    return Number.isInteger(value.pid) ? { pid: value.pid!, address: typeof value.address === 'string' ? value.address : undefined } : undefined;
  } catch {
    // A half-written record: its writer is still at work, or died in the middle.
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

async function serveEmbedded(dataDir: string, lockPath: string, logger: Logger): Promise<Database> {
  const release = () => {
    const owner = parseOwner(readLock(lockPath) ?? '');
    if (owner?.pid === process.pid) unlinkQuietly(lockPath);
  };
  // A process that ends without stop() (an uncaught error, process.exit) leaves no lock behind.
  process.once('exit', release);
  try {
    const { PGlite } = await import('@electric-sql/pglite');
    const db = await PGlite.create(path.join(dataDir, 'pglite'));
    // PGlite has one user, so the split cannot hold here; the roles exist for the migrations' grants.
    await ensureServiceRoles(db, { login: false });
    const server = await servePGlite(db, { host: '127.0.0.1', maxConnections: EMBEDDED_MAX_CONNECTIONS });
    const { address } = server;
    // Written aside and renamed, so a reader sees the old record or the new one, never half of one.
    const pending = `${lockPath}.${process.pid}`;
    writeFileSync(pending, JSON.stringify({ pid: process.pid, address } satisfies OwnerRecord));
    renameSync(pending, lockPath);
    const url = `postgres://postgres@${address}/postgres`;
    logger.info({ database: url, dataDir }, 'no DATABASE_URL and no local PostgreSQL: using embedded PGlite');
    const stop = async () => {
      await server.stop();
      await db.close();
      release();
      process.removeListener('exit', release);
    };
    return embeddedAt(url, OWNER_POOL_MAX, stop);
  } catch (error) {
    release();
    process.removeListener('exit', release);
    throw error;
  }
}

async function joinEmbedded(owner: Required<OwnerRecord>, lockPath: string, logger: Logger): Promise<Database> {
  const colon = owner.address.lastIndexOf(':');
  if (!(await answers(owner.address.slice(0, colon), Number(owner.address.slice(colon + 1))))) {
    throw new EmbeddedDatabaseBusyError(
      `process ${owner.pid} holds the embedded database (${lockPath}) but its server at ${owner.address} does not answer`,
    );
  }
  const url = `postgres://postgres@${owner.address}/postgres`;
  logger.info({ database: url, ownerPid: owner.pid }, 'no DATABASE_URL and no local PostgreSQL: using the embedded PGlite served by another process');
  return embeddedAt(url, JOINER_POOL_MAX);
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}
