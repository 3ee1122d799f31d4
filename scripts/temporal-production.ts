/**
 * Temporal's production server, as a platform team runs it: Temporal's own server binary on
 * PostgreSQL (not the CLI's development server on SQLite), its frontend behind mutual TLS.
 * Built from its Go module, pinned, into `.tools/`; its schema set up with Temporal's SQL
 * tool in two databases of the run's own; started from a configuration this module writes,
 * with certificates it makes; the namespace and the delivery search attributes registered.
 *
 *   tsx scripts/temporal-production.ts build    builds `server` and `sql` if missing; prints their folder
 *
 * The configuration and schema files Temporal ships are read from Go's module cache, where
 * the build put the module; nothing of Temporal's source is kept in this repository.
 * All four services (frontend, history, matching, worker) run in one process, on loopback.
 * The shard count is small (SHARDS): shards are the unit history work is spread over, and
 * a cluster's count is fixed when its database is created (512 is the usual start in
 * production; a single process on two cores does better with few).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { Client as PgClient } from 'pg';
import { temporalConnectionOptions, type TemporalConnectionOptions } from '../src/delivery';
import { makeMutualTls, type MutualTls } from '../test/support/tls';
import { DELIVERY_SEARCH_ATTRIBUTE_NAMES, deliverySearchAttributeType, freePort, installGoPackages, spawnWatched, stopChild, untilHealthy } from './temporal-server';

export const TEMPORAL_SERVER_MODULE = 'go.temporal.io/server';
export const TEMPORAL_SERVER_VERSION = 'v1.29.1';
/** History shards of the clusters this module creates; see the header and the README. */
export const SHARDS = 4;
/** The system namespace the server creates itself: it answers before any namespace of ours exists. */
const SYSTEM_NAMESPACE = 'temporal-system';
/** Temporal's IndexedValueType by the name `temporal operator search-attribute create --type` gives it. */
const INDEXED_VALUE_TYPE = { Keyword: 2, Int: 3 } as const;

const root = path.resolve(__dirname, '..');
const log = (line: string) => process.stderr.write(`${line}\n`);

export interface TemporalServerBinaries {
  server: string;
  sql: string;
}

/** `server` and `sql`, built with `go install` when missing; the version is in the folder's name. */
export function ensureTemporalServerBinaries(): TemporalServerBinaries {
  const dir = path.join(root, '.tools', `temporal-server-${TEMPORAL_SERVER_VERSION}`);
  const binaries = { server: path.join(dir, 'server'), sql: path.join(dir, 'sql') };
  if (!existsSync(binaries.server) || !existsSync(binaries.sql)) {
    installGoPackages(dir, ['cmd/server', 'cmd/tools/sql'].map((pkg) => `${TEMPORAL_SERVER_MODULE}/${pkg}@${TEMPORAL_SERVER_VERSION}`), log);
  }
  return binaries;
}

/** The module's folder in Go's module cache (its schema files); downloaded again if the cache was cleaned. */
function serverModuleDir(): string {
  const go = (args: string[]) => spawnSync('go', args, { encoding: 'utf8', env: { ...process.env, PATH: `${process.env.PATH}:/usr/local/go/bin` } });
  const cache = go(['env', 'GOMODCACHE']).stdout.trim();
  const dir = path.join(cache, `${TEMPORAL_SERVER_MODULE}@${TEMPORAL_SERVER_VERSION}`);
  if (!existsSync(dir)) {
    const downloaded = go(['mod', 'download', `${TEMPORAL_SERVER_MODULE}@${TEMPORAL_SERVER_VERSION}`]);
    if (downloaded.status !== 0) throw new Error(`go mod download ${TEMPORAL_SERVER_MODULE}@${TEMPORAL_SERVER_VERSION} failed: ${downloaded.stderr}`);
  }
  return dir;
}

/** Where the server keeps its two databases: a role that may create databases. */
export interface PostgresTarget {
  host: string;
  port: number;
  user: string;
  password?: string;
}

export interface ProductionServerOptions {
  postgres: PostgresTarget;
  namespace?: string;
  /** Names of the client certificates to make besides the service's (`service`). */
  clients?: string[];
  /** Where the server's own log goes (default: a file in the system's temporary folder, kept after `destroy()` for a failure's post-mortem). */
  logFile?: string;
}

export interface ProductionServer {
  /** host:port of the frontend (mTLS). */
  address: string;
  namespace: string;
  /** The run's CA, the server's certificate and the client certificates, as files in `dir`. */
  tls: MutualTls;
  dir: string;
  /** TEMPORAL_* settings with which a process of the service connects as `client` (default `service`). */
  serviceEnv(client?: string): Record<string, string>;
  /** Connection options for a client in this process, from the same settings. */
  connectionOptions(client?: string): TemporalConnectionOptions;
  /** The pid of the server (under its watchdog shell), or null while it is stopped. */
  pid(): number | null;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Ends it at once (SIGKILL). */
  kill(): Promise<void>;
  /** Starts it again on the same ports and databases (after stop or kill). */
  start(): Promise<void>;
  /** Stops it, drops its databases and removes its folder. */
  destroy(): Promise<void>;
}

/**
 * Creates the server's databases on `postgres` (names of this run's own), its certificates
 * and configuration in a temporary folder, starts it and registers the namespace and the
 * delivery search attributes. The caller calls `destroy()`, also when a check fails.
 */
export async function startTemporalProductionServer(options: ProductionServerOptions): Promise<ProductionServer> {
  const binaries = ensureTemporalServerBinaries();
  const moduleDir = serverModuleDir();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'temporal-production-'));
  const suffix = `${process.pid}_${Date.now().toString(36)}`;
  const databases = { main: `temporal_${suffix}`, visibility: `temporal_visibility_${suffix}` };
  const namespace = options.namespace ?? 'default';
  const clients = ['service', ...(options.clients ?? [])];
  let child: { child: ChildProcess; exited: Promise<number | null> } | null = null;
  let databasesCreated = false;

  const destroy = async () => {
    if (child) await stopChild(child.child, child.exited, 'SIGKILL');
    child = null;
    if (databasesCreated) await dropDatabases(options.postgres, Object.values(databases));
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const tls = await makeMutualTls('Temporal', [...clients, 'system-worker']);
    const files = writeCertificates(dir, tls);
    databasesCreated = true;
    await Promise.all([
      setUpSchema(binaries.sql, options.postgres, databases.main, path.join(moduleDir, 'schema/postgresql/v12/temporal/versioned')),
      setUpSchema(binaries.sql, options.postgres, databases.visibility, path.join(moduleDir, 'schema/postgresql/v12/visibility/versioned')),
    ]);
    const ports = { frontend: await freePort(), frontendHttp: await freePort(), members: [] as number[], services: [] as number[] };
    for (let i = 0; i < 4; i++) {
      ports.members.push(await freeLowPort());
      ports.services.push(await freePort());
    }
    writeConfig(dir, options.postgres, databases, files, ports);
    const address = `127.0.0.1:${ports.frontend}`;
    const logFile = options.logFile ?? path.join(os.tmpdir(), `temporal-production-${suffix}.log`);

    const connectionOptions = (client = 'service') => temporalConnectionOptions({ address, apiKey: null, tls: {
      serverCa: Buffer.from(tls.caPem),
      clientCert: { cert: Buffer.from(tls.clients[client]!.certPem), key: Buffer.from(tls.clients[client]!.keyPem) },
      serverName: 'localhost',
    } });
    const start = async () => {
      const started = spawnWatched('temporal-server', binaries.server, ['--root', dir, '--config', 'config', '--env', 'production', '--allow-no-auth', 'start'], logFile);
      child = started;
      try {
        await untilHealthy(connectionOptions(), SYSTEM_NAMESPACE, started.child, started.exited);
      } catch (error) {
        await stopChild(started.child, started.exited, 'SIGKILL');
        throw new Error(`${String(error)} (server log: ${logFile})`, { cause: error });
      }
    };
    await start();
    await registerNamespace(connectionOptions(), namespace);

    return {
      address,
      namespace,
      tls,
      dir,
      serviceEnv: (client = 'service') => ({
        TEMPORAL_ADDRESS: address,
        TEMPORAL_NAMESPACE: namespace,
        TEMPORAL_TLS_CA_FILE: files.ca,
        TEMPORAL_TLS_CERT_FILE: files.clients[client]!.cert,
        TEMPORAL_TLS_KEY_FILE: files.clients[client]!.key,
        TEMPORAL_TLS_SERVER_NAME: 'localhost',
      }),
      connectionOptions,
      pid: () => child?.child.pid ?? null,
      stop: async () => {
        if (child) await stopChild(child.child, child.exited, 'SIGTERM');
        child = null;
      },
      kill: async () => {
        if (child) await stopChild(child.child, child.exited, 'SIGKILL');
        child = null;
      },
      start,
      destroy,
    };
  } catch (error) {
    await destroy();
    throw error;
  }
}

/**
 * A free port below 32768: the cluster_membership table keeps a member's port as a smallint,
 * and the kernel's own choice of a free port (ephemeral range) is above it.
 */
async function freeLowPort(): Promise<number> {
  for (let tries = 0; tries < 100; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port found between 20000 and 32000');
}

interface CertificateFiles {
  ca: string;
  server: { cert: string; key: string };
  clients: Record<string, { cert: string; key: string }>;
}

function writeCertificates(dir: string, tls: MutualTls): CertificateFiles {
  const certs = path.join(dir, 'certs');
  mkdirSync(certs);
  const write = (name: string, pem: string) => {
    const file = path.join(certs, name);
    writeFileSync(file, pem, { mode: 0o600 });
    return file;
  };
  const pair = (name: string, p: { certPem: string; keyPem: string }) => ({ cert: write(`${name}.pem`, p.certPem), key: write(`${name}.key`, p.keyPem) });
  return {
    ca: write('ca.pem', tls.caPem),
    server: pair('server', tls.server),
    clients: Object.fromEntries(Object.entries(tls.clients).map(([name, p]) => [name, pair(name, p)])),
  };
}

/** Temporal's SQL tool: create the database, set up the base schema, apply every versioned step. */
async function setUpSchema(sql: string, pg: PostgresTarget, database: string, versioned: string): Promise<void> {
  const connect = ['--plugin', 'postgres12', '--ep', pg.host, '-p', String(pg.port), '-u', pg.user, ...(pg.password ? ['--pw', pg.password] : []), '--db', database];
  for (const step of [['create'], ['setup-schema', '-v', '0.0'], ['update-schema', '-d', versioned]]) {
    const output: Buffer[] = [];
    const tool = spawn(sql, [...connect, ...step], { stdio: ['ignore', 'pipe', 'pipe'] });
    tool.stdout.on('data', (chunk: Buffer) => output.push(chunk));
    tool.stderr.on('data', (chunk: Buffer) => output.push(chunk));
    const code = await new Promise<number | null>((resolve) => tool.once('exit', resolve));
    if (code !== 0) throw new Error(`temporal sql ${step[0]} on ${database} failed (exit ${code}): ${Buffer.concat(output).toString().slice(-2000)}`);
  }
}

async function dropDatabases(pg: PostgresTarget, names: string[]): Promise<void> {
  const admin = new PgClient({ host: pg.host, port: pg.port, user: pg.user, password: pg.password, database: 'postgres' });
  try {
    await admin.connect();
    for (const name of names) await admin.query(`drop database if exists "${name}" with (force)`);
  } catch {
    // A cluster already stopped takes its databases with it.
  } finally {
    await admin.end().catch(() => undefined);
  }
}

/**
 * The server's configuration (`config/production.yaml`, written as JSON, which YAML reads):
 * PostgreSQL persistence and visibility, the frontend asking every client for a certificate
 * the run's CA signed, the system worker (archival and other background work) presenting
 * its own, internode traffic on loopback in the clear, and no archival (the server refuses
 * an archival provider it cannot reach).
 */
function writeConfig(
  dir: string,
  pg: PostgresTarget,
  databases: { main: string; visibility: string },
  files: CertificateFiles,
  ports: { frontend: number; frontendHttp: number; members: number[]; services: number[] },
): void {
  const store = (databaseName: string, maxConns: number) => ({
    sql: {
      pluginName: 'postgres12',
      databaseName,
      connectAddr: `${pg.host}:${pg.port}`,
      connectProtocol: 'tcp',
      user: pg.user,
      password: pg.password ?? '',
      maxConns,
      maxIdleConns: maxConns,
      maxConnLifetime: '1h',
    },
  });
  const service = (grpcPort: number, membershipPort: number, extra: Record<string, unknown> = {}) => ({ rpc: { grpcPort, membershipPort, bindOnLocalHost: true, ...extra } });
  const config = {
    log: { stdout: true, level: 'warn' },
    persistence: {
      defaultStore: 'postgres-default',
      visibilityStore: 'postgres-visibility',
      numHistoryShards: SHARDS,
      datastores: { 'postgres-default': store(databases.main, 20), 'postgres-visibility': store(databases.visibility, 4) },
    },
    global: {
      membership: { maxJoinDuration: '30s', broadcastAddress: '127.0.0.1' },
      tls: {
        frontend: {
          server: { certFile: files.server.cert, keyFile: files.server.key, requireClientAuth: true, clientCaFiles: [files.ca] },
          client: { serverName: 'localhost', rootCaFiles: [files.ca] },
        },
        systemWorker: {
          certFile: files.clients['system-worker']!.cert,
          keyFile: files.clients['system-worker']!.key,
          client: { serverName: 'localhost', rootCaFiles: [files.ca] },
        },
      },
    },
    services: {
      frontend: service(ports.frontend, ports.members[0]!, { httpPort: ports.frontendHttp }),
      history: service(ports.services[1]!, ports.members[1]!),
      matching: service(ports.services[2]!, ports.members[2]!),
      worker: service(ports.services[3]!, ports.members[3]!),
    },
    clusterMetadata: {
      enableGlobalNamespace: false,
      failoverVersionIncrement: 10,
      masterClusterName: 'active',
      currentClusterName: 'active',
      clusterInformation: { active: { enabled: true, initialFailoverVersion: 1, rpcName: 'frontend', rpcAddress: `localhost:${ports.frontend}` } },
    },
    dcRedirectionPolicy: { policy: 'noop' },
    dynamicConfigClient: { filepath: path.join(dir, 'config', 'dynamicconfig.yaml'), pollInterval: '10s' },
  };
  // Fairness between endpoints on the activity task queue (the activity's fairness key), and
  // eager activity dispatch (scripts/temporal-server.ts says why).
  const dynamicConfig = { 'matching.enableFairness': [{ value: true }], 'system.enableActivityEagerExecution': [{ value: true }] };
  mkdirSync(path.join(dir, 'config'));
  writeFileSync(path.join(dir, 'config', 'production.yaml'), JSON.stringify(config, null, 2));
  writeFileSync(path.join(dir, 'config', 'dynamicconfig.yaml'), JSON.stringify(dynamicConfig, null, 2));
}

/**
 * Registers the namespace and the delivery search attributes, then waits until the frontend
 * serves the namespace (its namespace cache refreshes every 2 s) and lists the attributes.
 */
async function registerNamespace(options: TemporalConnectionOptions, namespace: string): Promise<void> {
  const connection = await Connection.connect(options);
  try {
    try {
      await connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('3 days') });
    } catch (error) {
      if (!/already exists/i.test(String(error))) throw error;
    }
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: Object.fromEntries(DELIVERY_SEARCH_ATTRIBUTE_NAMES.map((name) => [name, INDEXED_VALUE_TYPE[deliverySearchAttributeType(name)]])) });
        break;
      } catch (error) {
        if (/already exists/i.test(String(error))) break;
        if (Date.now() > deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
    for (;;) {
      try {
        const listed = await connection.operatorService.listSearchAttributes({ namespace });
        await connection.workflowService.countWorkflowExecutions({ namespace, query: '' });
        if (DELIVERY_SEARCH_ATTRIBUTE_NAMES.every((name) => name in (listed.customAttributes ?? {}))) return;
      } catch (error) {
        if (Date.now() > deadline) throw error;
      }
      if (Date.now() > deadline) throw new Error(`namespace ${namespace} or its search attributes not served within 30 s`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  } finally {
    await connection.close();
  }
}

async function main(command: string | undefined): Promise<void> {
  if (command === 'build') {
    process.stdout.write(`${path.dirname(ensureTemporalServerBinaries().server)}\n`);
    return;
  }
  throw new Error('usage: tsx scripts/temporal-production.ts build');
}

if (require.main === module) {
  main(process.argv[2]).catch((error: unknown) => {
    process.stderr.write(`temporal-production: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
