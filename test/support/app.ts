import { loadConfig, type Config } from '../../src/config';
import { createLogger, type Logger } from '../../src/config/logger';
import type { Options } from '@mikro-orm/postgresql';
import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { createClient, createRouterTransport, type Client, type Transport } from '@connectrpc/connect';
import type { DescService } from '@bufbuild/protobuf';
import { build, start, type App } from '../../src/server';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import type { Plan, Role } from '../../src/db';
import { createTestDatabase } from './databases';
import { authorizedAs, restVia, transport as socketTransport, type AppFetch, type RestAnswer, type RestOptions } from './clients';
import { inProcessFetch } from './in-process';

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
  /**
   * A request for a path, or for the path and query of a link the app gave out: in process
   * when the app does not listen, over its socket when it does.
   */
  fetch: AppFetch;
  /** A REST call, as `fetch` sends it. */
  rest(method: string, path: string, options?: RestOptions): Promise<RestAnswer>;
  /**
   * A transport for RPCs as `apiKey`: in process through createRouterTransport over the
   * app's routes and call options (gate, interceptors) when the app does not listen, gRPC
   * over its socket when it does.
   */
  transport(apiKey?: string): Transport;
  /** A client of `service` over `transport(apiKey)`. */
  client<T extends DescService>(service: T, apiKey?: string): Client<T>;
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

export interface TestAppOptions {
  now?: () => number;
  /** Reuse this database (kept on close) instead of a fresh one. */
  databaseUrl?: string;
  /**
   * Listen on a free port (default). False serves every call in process, for suites that
   * test behaviour rather than what a transport promises.
   */
  listen?: boolean;
  /** More ORM options (a pool hook that watches the statements sent, say). */
  orm?: Partial<Options>;
  /** Where the service logs (silent unless TEST_LOG_LEVEL says otherwise). */
  logger?: Logger;
}

/** The app over a database of its own: a real listener on a free port, or in process. */
export async function startTestApp(env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestApp> {
  const database = options.databaseUrl
    ? { url: options.databaseUrl, ownerUrl: null, adminUrl: null, drop: async () => undefined }
    : await createTestDatabase();
  const config = loadConfig({ ...TEST_ENV, DATABASE_URL: database.url, ...env });
  const orm = await openDatabase(databaseAt(database.url), options.orm);
  const buildOptions = { config, orm, logger: options.logger ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'), now: options.now };
  let app: App;
  let send: AppFetch;
  let rpc: TestApp['transport'];
  if (options.listen === false) {
    const built = await build(buildOptions);
    const { deps } = built;
    app = { url: deps.publicUrl.get(), port: 0, orm, logger: deps.logger, gateway: built.gateway, delivery: deps.delivery, close: built.close };
    send = inProcessFetch(built.handler);
    rpc = (apiKey) => createRouterTransport(built.routes, { router: built.routerOptions, transport: { interceptors: authorizedAs(apiKey) } });
  } else {
    const listening = await start(buildOptions);
    app = listening;
    // Links carry the public URL (http://localhost:0 under port 0), not where the app listens.
    send = (path, init) => {
      const target = new URL(path, listening.url);
      return fetch(`${listening.url}${target.pathname}${target.search}`, init);
    };
    rpc = (apiKey) => socketTransport(listening.url, 'grpc', apiKey);
  }
  return {
    app,
    orm,
    config,
    url: app.url,
    fetch: send,
    rest: (method, path, restOptions) => restVia(send, method, path, restOptions),
    transport: rpc,
    client: (service, apiKey) => createClient(service, rpc(apiKey)),
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
