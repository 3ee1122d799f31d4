import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { randomUUID } from 'node:crypto';
import { createConnectRouter, type ConnectRouter } from '@connectrpc/connect';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import type { Config } from '../config';
import { createLogger, type Logger } from '../config/logger';
import { openDatabase, migrate, type MikroORM } from '../db';
import { PrincipalCache, createAuthGate, createAuthorizeInterceptor } from '../auth';
import { createAuditInterceptor } from '../audit';
import { ConnectionServiceImpl, StateSigner, SandboxProvider, ComposioProvider } from '../connections';
import { PostServiceImpl } from '../posts';
import { WebhookServiceImpl, SecretBox, WebhookRateLimiter } from '../webhooks';
import { OperatorServiceImpl } from '../operator';
import { EventPublisher, EventServiceImpl } from '../events';
import {
  activityDepsFromConfig,
  createTemporalClient,
  DeliveryAttempts,
  DeliveryRecords,
  EmbeddedDeliveryEngine,
  PendingDeliverySweeper,
  TemporalDeliveryEngine,
  type DeliveryEngine,
  type DeliveryEvent,
} from '../delivery';
import { Health } from '../gen/grpc/health/v1/health_pb';
import { ConnectionService } from '../gen/publishing/v1/connection_service_pb';
import { WebhookService } from '../gen/publishing/v1/webhook_service_pb';
import { PostService } from '../gen/publishing/v1/post_service_pb';
import { OperatorService } from '../gen/publishing/operator/v1/operator_service_pb';
import { EventService } from '../gen/publishing/internal/v1/event_service_pb';
import { clientWentAway, createListener, type Listener, type RequestHandler } from './listener';
import { createRpcHandler } from './rpc-handler';
import { RestGateway, sendError, writeBody, writeJson } from './gateway';
import { createRequestContextInterceptor, createRequestGate, createStorableTextInterceptor, UNAVAILABLE_RETRY_AFTER_SECONDS } from './request-context';
import { createRefusalAudit } from './refusal-audit';
import { HealthService, blocking, databaseReadiness, downDependencies, type ReadinessCheck } from './health';
import { createReflectionServices, REFLECTION_SERVICES } from './reflection';
import { Metrics } from './metrics';
import { openApiDocument } from './openapi-route';
import { requestIdFrom } from '../context';

/** Where the provider returns the browser; the page shows what to send to /connections/complete. */
const CALLBACK_PATH = '/connections/callback';

function showCallback(rawUrl: string, res: Parameters<RequestHandler>[1]): void {
  const params = new URL(rawUrl, 'http://callback.invalid').searchParams;
  writeJson(
    res,
    200,
    JSON.stringify({
      state: params.get('state') ?? '',
      connectedAccountId: params.get('connected_account_id') ?? params.get('connectedAccountId') ?? '',
      next: 'POST /api/v1/connections/complete with this state and connectedAccountId',
    }),
  );
}

/** Services under /api/v1 (REST) as well as gRPC and Connect. */
export const PUBLIC_SERVICES = [ConnectionService, WebhookService, PostService] as const;

export interface App {
  /** Base URL of the listener, e.g. http://127.0.0.1:41234 */
  url: string;
  port: number;
  orm: MikroORM;
  logger: Logger;
  gateway: RestGateway;
  delivery: Deliveries;
  close(): Promise<void>;
}

export interface BuildOptions {
  config: Config;
  /** An ORM already connected and migrated (tests share one per file); opened from config otherwise. */
  orm?: MikroORM;
  logger?: Logger;
  /** The clock every rule reads (state expiry, schedules); tests move it. */
  now?: () => number;
  /**
   * Keep authenticated API keys between calls (default true). Needs LISTEN/NOTIFY across
   * sessions, which the embedded PGlite server, one session for all, cannot give.
   */
  cachePrincipals?: boolean;
}

export interface Deliveries {
  records: DeliveryRecords;
  engine: DeliveryEngine;
  /** The embedded engine, when no Temporal address is configured. */
  embedded: EmbeddedDeliveryEngine | null;
  /** Whether the engine answers now (Temporal may be unreachable; the embedded engine always is). */
  reachable(): Promise<boolean>;
  close(): Promise<void>;
}

/** Temporal when TEMPORAL_ADDRESS is set; otherwise the embedded engine over the delivery rows. */
function deliveriesFor(
  config: Config,
  deps: {
    orm: MikroORM;
    logger: Logger;
    now: () => number;
    records: DeliveryRecords;
    temporal: ReturnType<typeof createTemporalClient> | null;
    onEvent: (event: DeliveryEvent) => void;
  },
): Deliveries {
  const { records, temporal } = deps;
  if (config.temporal && temporal) {
    const engine = new TemporalDeliveryEngine({
      client: temporal.client,
      taskQueue: config.temporal.taskQueue,
      searchAttributes: config.temporal.searchAttributes,
    });
    const sweeper = new PendingDeliverySweeper({ orm: deps.orm, records, engine, logger: deps.logger, intervalMs: 30_000, olderThanMs: 60_000, now: deps.now });
    sweeper.begin();
    deps.logger.info({ address: config.temporal.address, taskQueue: config.temporal.taskQueue }, 'deliveries run on Temporal');
    return {
      records,
      engine,
      embedded: null,
      reachable: temporal.reachable,
      async close() {
        await sweeper.close();
        await temporal.close();
      },
    };
  }
  const attempts = new DeliveryAttempts(activityDepsFromConfig(config, deps));
  const embedded = new EmbeddedDeliveryEngine({
    orm: deps.orm,
    attempts,
    logger: deps.logger,
    pollIntervalMs: config.delivery.pollIntervalMs,
    concurrency: config.delivery.concurrency,
  });
  deps.logger.info('deliveries run on the embedded engine (no TEMPORAL_ADDRESS)');
  return { records, engine: embedded, embedded, reachable: async () => true, close: () => embedded.close() };
}

/** Composition root: wires every dependency and returns a listening app (port 0 picks a free one). */
export async function start(options: BuildOptions): Promise<App> {
  const { config } = options;
  const logger = options.logger ?? createLogger(config.logLevel);
  const ownsOrm = !options.orm;
  const orm = options.orm ?? (await openDatabase(config.databaseUrl));
  if (ownsOrm) await migrate(orm);

  const now = options.now ?? Date.now;
  // Filled in once the listener is bound when PUBLIC_URL is unset (port 0 picks the port then).
  let publicUrl = config.publicUrl ?? `http://localhost:${config.port}`;
  const sandbox = config.provider.kind === 'sandbox' ? new SandboxProvider(() => publicUrl, config.stateSigningKey) : null;
  const provider =
    config.provider.kind === 'composio'
      ? new ComposioProvider({ baseUrl: config.provider.baseUrl, apiKey: config.provider.apiKey, authConfigIds: config.provider.authConfigIds })
      : (sandbox as SandboxProvider);
  const secrets = new SecretBox(config.secretKeys, config.currentSecretKeyId);
  // rate-limiter-flexible wants a pg pool of its own; two connections are plenty for its upserts.
  const limiterPool = new Pool({ connectionString: String(orm.config.get('clientUrl')), max: 2 });
  // An idle client dies when PostgreSQL restarts; without a listener that error would end the process.
  limiterPool.on('error', (error) => logger.warn({ err: error }, 'rate-limit pool lost a connection'));
  const principals = options.cachePrincipals === false ? undefined : new PrincipalCache({ connectionString: String(orm.config.get('clientUrl')), logger });
  await principals?.start();
  const records = new DeliveryRecords({ now, retryIntervalMs: config.delivery.retryIntervalMs });
  const temporal = config.temporal ? createTemporalClient(config.temporal) : null;
  const metrics = new Metrics({ orm, records, engineReachable: temporal?.reachable });
  const delivery = deliveriesFor(config, { orm, logger, now, records, temporal, onEvent: metrics.observeDelivery });
  const webhooks = new WebhookServiceImpl({
    secrets,
    limiter: new WebhookRateLimiter(limiterPool),
    deliveries: delivery.records,
    engine: delivery.engine,
    allowCidrs: config.delivery.allowCidrs,
    now,
  });
  const publisher = new EventPublisher({ deliveries: delivery.records, engine: delivery.engine, logger, now });
  const events = new EventServiceImpl(publisher);
  const connections = new ConnectionServiceImpl({
    provider,
    signer: new StateSigner(config.stateSigningKey),
    callbackUrl: () => `${publicUrl}${CALLBACK_PATH}`,
    events: publisher,
    now,
  });
  const posts = new PostServiceImpl(now, publisher);
  const operator = new OperatorServiceImpl({ now, deliveries: delivery.records, engine: delivery.engine, events: publisher, logger });
  delivery.embedded?.begin();

  // What /readyz and the gRPC health service report on; each dependency adds its check here.
  const readiness: ReadinessCheck[] = [
    databaseReadiness(orm),
    ...(temporal ? [{ name: 'temporal', required: false, probe: temporal.reachable }] : []),
  ];

  const [ReflectionV1, ReflectionV1alpha] = REFLECTION_SERVICES;
  const reflection = createReflectionServices([Health, ...PUBLIC_SERVICES, OperatorService, ...REFLECTION_SERVICES]);
  const routes = (router: ConnectRouter) => {
    router.service(Health, new HealthService(readiness, [...PUBLIC_SERVICES.map((s) => s.typeName), OperatorService.typeName, EventService.typeName]));
    router.service(ConnectionService, connections);
    router.service(WebhookService, webhooks);
    router.service(PostService, posts);
    router.service(OperatorService, operator);
    router.service(EventService, events);
    router.service(ReflectionV1, reflection.v1);
    router.service(ReflectionV1alpha, reflection.v1alpha);
  };

  const routerOptions = {
    requestGate: createRequestGate({
      orm,
      logger,
      observe: metrics.observeCall,
      authenticate: createAuthGate({
        operatorToken: config.operatorToken,
        // Reflection is open like Health: it answers only with the schema (the public
        // proto/ API, nothing tenant-specific), so tools can discover it without a key.
        openServices: [Health.typeName, ...REFLECTION_SERVICES.map((s) => s.typeName)],
        operatorServices: [OperatorService.typeName],
        internalServices: [EventService.typeName],
        internalTokens: config.internalServiceTokens,
        principals,
      }),
      auditRefusal: createRefusalAudit(logger),
    }),
    interceptors: [
      createRequestContextInterceptor(orm, logger, metrics.observeCall),
      createAuditInterceptor(logger),
      createStorableTextInterceptor(),
      createAuthorizeInterceptor(),
    ],
    readMaxBytes: config.maxBodyBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
  };
  const router = createConnectRouter(routerOptions);
  routes(router);
  const gateway = new RestGateway({ router, services: PUBLIC_SERVICES.map((s) => s.typeName), maxBodyBytes: config.maxBodyBytes });
  const rpcHandler = createRpcHandler({ router, logger });

  const handler: RequestHandler = (req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (path === '/healthz') return writeJson(res, 200, '{"status":"ok"}');
    if (path === '/readyz') {
      void downDependencies(readiness).then((down) => {
        const unavailable = blocking(readiness, down);
        if (unavailable) res.setHeader('retry-after', String(UNAVAILABLE_RETRY_AFTER_SECONDS));
        const status = unavailable ? 'unavailable' : down.length > 0 ? 'degraded' : 'ready';
        writeJson(res, unavailable ? 503 : 200, JSON.stringify({ status, down }));
      });
      return;
    }
    if (path === '/metrics') {
      void metrics.registry.metrics().then(
        (text) => writeBody(res, 200, metrics.registry.contentType, text),
        (error: unknown) => {
          logger.error({ err: error }, 'metrics collection failed');
          sendError(res, 'INTERNAL', 'Metrics are unavailable.', randomUUID());
        },
      );
      return;
    }
    if (path === CALLBACK_PATH) return void showCallback(req.url ?? '/', res);
    if (sandbox && sandbox.handle(req as never, res as never)) return;
    if (path === '/api/v1/openapi.json' && req.method === 'GET') {
      try {
        return writeJson(res, 200, openApiDocument());
      } catch (error) {
        logger.error({ err: error }, 'openapi.json unavailable');
        return sendError(res, 'INTERNAL', 'The API description is unavailable.', randomUUID());
      }
    }
    if (path === '/api/v1' || path.startsWith('/api/v1/')) {
      const incoming = req.headers['x-request-id'];
      const requestId = requestIdFrom(typeof incoming === 'string' ? incoming : null);
      gateway.handle(req, res, requestId).catch((error: unknown) => {
        if (clientWentAway(req, res)) return logger.debug({ err: error, requestId }, 'client went away before its answer was written');
        logger.error({ err: error, requestId }, 'gateway failure');
        sendError(res, 'INTERNAL', `Internal error; quote request id ${requestId} when reporting it.`, requestId);
      });
      return;
    }
    rpcHandler(req, res);
  };

  const listener: Listener = createListener(handler);
  await new Promise<void>((resolve, reject) => {
    listener.server.once('error', reject);
    listener.server.listen(config.port, config.host, () => resolve());
  });
  const port = (listener.server.address() as AddressInfo).port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  if (config.publicUrl === null) publicUrl = `http://localhost:${port}`;
  logger.info({ url }, 'listening');

  return {
    url,
    port,
    orm,
    logger,
    gateway,
    delivery,
    async close() {
      await listener.shutdown(10_000);
      await delivery.close();
      await principals?.close();
      await limiterPool.end();
      if (ownsOrm) await orm.close();
    },
  };
}
