/**
 * The production topology for the Temporal cost benchmark (bench/temporal-cost.ts): the API
 * and the delivery worker each in a process of its own (`npm start`, `npm run worker`, with
 * the service's Node flags), an HTTPS receiver in the bench's process, one PostgreSQL
 * database of the run's own, and a Temporal server: the development server on its SQLite
 * file, or Temporal's own server on PostgreSQL behind mutual TLS (scripts/temporal-production.ts).
 * Everything runs on loopback on the same machine; the caller stops what it started.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { Client as PgClient } from 'pg';
import { startTemporalDevServer, type DevServer } from '../scripts/temporal-server';
import { startTemporalProductionServer, type ProductionServer } from '../scripts/temporal-production';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../src/auth';
import { OWNER_ROLE, SERVICE_ROLE, databaseAt, ensureServiceRoles, migrateAs, openDatabase } from '../src/db';
import type { TemporalConnectionOptions } from '../src/delivery';
import { startHttpsReceiver, type HttpsReceiver } from '../test/support/https-receiver';
import { startServiceProcess, type ServiceProcess } from '../test/support/service-process';
import { makeTestTls } from '../test/support/tls';

export const PUBLISHER_TOKEN = 'bench-cost-publisher-token-0123456789abcdef';
const ADMIN_URL = process.env.BENCH_DATABASE_ADMIN_URL ?? process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export type ServerKind = 'dev' | 'production';

export interface TemporalTarget {
  kind: ServerKind;
  /** TEMPORAL_* settings for the service's processes. */
  env: Record<string, string>;
  connectionOptions: TemporalConnectionOptions;
  namespace: string;
  /** The server's pid (under its watchdog shell), for its CPU. */
  pid(): number | null;
  stop(): Promise<void>;
}

function urlOf(database: string, role?: string): string {
  const url = new URL(ADMIN_URL);
  url.pathname = `/${database}`;
  if (role) {
    url.username = role;
    url.password = '';
  }
  return url.toString();
}

async function admin<T>(fn: (client: PgClient) => Promise<T>): Promise<T> {
  const client = new PgClient({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * `serverVariant`: dynamic configuration besides the project's, and under the key
 * `sqlitePragmas` (a list) the SQLite pragmas instead of the project's (development server only).
 */
export async function startTemporalTarget(kind: ServerKind, serverVariant: Record<string, unknown> = {}): Promise<TemporalTarget> {
  const { sqlitePragmas, ...dynamicConfig } = serverVariant;
  if (kind === 'dev') {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-temporal-dev-'));
    const server: DevServer = await startTemporalDevServer({
      uiPort: false,
      dbFile: path.join(dir, 'temporal.db'),
      logFile: path.join(dir, 'server.log'),
      dynamicConfig: Object.entries(dynamicConfig).map(([key, value]) => [key, JSON.stringify(value)] as const),
      ...(sqlitePragmas === undefined ? {} : { sqlitePragmas: sqlitePragmas as string[] }),
    });
    return {
      kind,
      env: { TEMPORAL_ADDRESS: server.address, TEMPORAL_NAMESPACE: server.namespace },
      connectionOptions: { address: server.address },
      namespace: server.namespace,
      pid: () => server.pid,
      async stop() {
        await server.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  if (Object.keys(serverVariant).length > 0) throw new Error('server variants run on the development server only');
  const url = new URL(ADMIN_URL);
  const server: ProductionServer = await startTemporalProductionServer({ postgres: { host: url.hostname, port: Number(url.port || 5432), user: decodeURIComponent(url.username || 'postgres') } });
  return {
    kind,
    env: server.serviceEnv('service'),
    connectionOptions: server.connectionOptions('service'),
    namespace: server.namespace,
    pid: () => server.pid(),
    stop: () => server.destroy(),
  };
}

export interface Topology {
  receiver: HttpsReceiver;
  databaseUrl: string;
  /** A publish through the API's Connect route (JSON), as a publisher calls it: the deliveries' ids. */
  publish(eventType: string, eventId: string): Promise<string[]>;
  /** Endpoints subscribed to `eventType`, at `${receiver}/${eventType}/<i>`. */
  subscribe(eventType: string, count: number): Promise<void>;
  sql<T>(text: string, params?: unknown[]): Promise<T[]>;
  /** Starts an API and a worker on `taskQueue` with the extra settings; stopped with `stopService`. */
  startService(temporal: TemporalTarget, taskQueue: string, extra: Record<string, string>, nodeOptions?: string): Promise<{ api: ServiceProcess; worker: ServiceProcess }>;
  close(): Promise<void>;
}

/** A database of its own (migrated), the receiver, the production workflow bundle and a tenant. */
export async function startTopology(): Promise<Topology> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-temporal-cost-'));
  const name = `publishing_bench_tcost_${randomBytes(4).toString('hex')}`;
  await admin(async (client) => {
    await ensureServiceRoles(client, { login: true });
    await client.query(`create database ${name} owner ${OWNER_ROLE}`);
  });
  await migrateAs(databaseAt(urlOf(name, OWNER_ROLE)));
  const databaseUrl = urlOf(name, SERVICE_ROLE);
  const bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: new DefaultLogger('ERROR') });
  const bundlePath = path.join(dir, 'workflows.js');
  writeFileSync(bundlePath, bundle.code);
  const tls = await makeTestTls();
  const receiver = await startHttpsReceiver({ tls });

  const orm = await openDatabase(databaseAt(urlOf(name)), { pool: { min: 0, max: 2 } });
  const em = orm.em.fork();
  const org = await createOrganization(em, { name: 'Bench', plan: 'command' });
  const user = await createUser(em, { organizationId: org.id, email: `owner-${org.id}@example.com`, role: 'owner' });
  const key = (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'bench', scopes: [...PERMISSIONS] })).key;
  await orm.close();

  let api: ServiceProcess | null = null;
  const sql = async <T>(text: string, params: unknown[] = []): Promise<T[]> => {
    const client = new PgClient({ connectionString: urlOf(name) });
    await client.connect();
    try {
      return (await client.query(text, params)).rows as T[];
    } finally {
      await client.end();
    }
  };
  const base = () => {
    if (!api?.url) throw new Error('no API running');
    return api.url;
  };

  return {
    receiver,
    databaseUrl,
    sql,
    async subscribe(eventType, count) {
      for (let i = 0; i < count; i += 16) {
        await Promise.all(
          Array.from({ length: Math.min(16, count - i) }, async (_, j) => {
            const res = await fetch(`${base()}/api/v1/webhooks`, {
              method: 'POST',
              headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
              body: JSON.stringify({ url: `${receiver.url}/${eventType}/${i + j}`, eventNames: [eventType] }),
            });
            if (res.status !== 200) throw new Error(`create webhook: ${res.status} ${await res.text()}`);
          }),
        );
      }
    },
    async publish(eventType, eventId) {
      const res = await fetch(`${base()}/publishing.internal.v1.EventService/PublishEvent`, {
        method: 'POST',
        headers: { authorization: `Bearer ${PUBLISHER_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ organizationId: org.id, eventId, eventType, payload: { postId: eventId } }),
      });
      if (res.status !== 200) throw new Error(`publish: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { event: { deliveries: { deliveryId: string }[] } }).event.deliveries.map((d) => d.deliveryId);
    },
    async startService(temporal, taskQueue, extra, nodeOptions) {
      const env = {
        DATABASE_URL: databaseUrl,
        DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
        DELIVERY_EXTRA_CA_PEM: tls.caPem,
        INTERNAL_SERVICE_TOKENS: `bench:${PUBLISHER_TOKEN}`,
        TEMPORAL_TASK_QUEUE: taskQueue,
        TEMPORAL_SEARCH_ATTRIBUTES: 'true',
        WORKER_WORKFLOW_BUNDLE: bundlePath,
        ...temporal.env,
        ...(nodeOptions && { NODE_OPTIONS: nodeOptions }),
        ...extra,
      };
      const [started, worker] = await Promise.all([startServiceProcess('api', env), startServiceProcess('worker', env)]);
      api = started;
      return { api: started, worker };
    },
    async close() {
      await receiver.close();
      await admin(async (client) => void (await client.query(`drop database if exists ${name} with (force)`)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A client of the target's namespace, for histories and descriptions. */
export async function temporalClient(target: TemporalTarget): Promise<Client> {
  return new Client({ connection: await Connection.connect(target.connectionOptions), namespace: target.namespace });
}
