import { Pool } from 'pg';
import { type Config, createLogger, type Logger } from '../config';
import { databaseAt, openDatabase, migrate, type MikroORM } from '../db';
import { PrincipalCache } from '../auth';
import { ConnectionServiceImpl, StateSigner, SandboxProvider, ComposioProvider } from '../connections';
import { PostServiceImpl } from '../posts';
import { FailingEndpointPause, WebhookServiceImpl, WebhookRateLimiter } from '../webhooks';
import { SecretBox } from '../secrets';
import { OperatorServiceImpl } from '../operator';
import { EventPublisher, EventServiceImpl } from '../events';
import { DeliveryLogServiceImpl, DeliveryRecovery } from '../recovery';
import { PortalPages, PortalServiceImpl, PortalSessions } from '../portal';
import { RetentionSweep } from '../retention';
import {
  activityDepsFromConfig,
  createTemporalClient,
  DeliveryAttempts,
  DeliveryRecords,
  EmbeddedDeliveryEngine,
  PendingDeliverySweeper,
  StatisticsRollup,
  TemporalDeliveryEngine,
  type DeliveryEngine,
  type DeliveryEvent,
} from '../delivery';
import { databaseReadiness, ShutdownReadiness, type ReadinessCheck } from './health';
import { Metrics } from './metrics';

/** Where the provider returns the browser; the page shows what to send to /connections/complete. */
export const CALLBACK_PATH = '/connections/callback';

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

/**
 * The base URL the provider sends browsers back to. PUBLIC_URL when set; otherwise
 * http://localhost:<port>, where the port is known only once the listener is bound
 * (port 0 picks one), so the listener reports it.
 */
export class PublicUrl {
  private value: string;

  constructor(private readonly config: Config) {
    this.value = config.publicUrl ?? `http://localhost:${config.port}`;
  }

  get(): string {
    return this.value;
  }

  listeningOn(port: number): void {
    if (this.config.publicUrl === null) this.value = `http://localhost:${port}`;
  }
}

/** Everything the routes serve with, built once, in the order each piece needs the others. */
export interface Dependencies {
  config: Config;
  logger: Logger;
  orm: MikroORM;
  publicUrl: PublicUrl;
  /** The sandbox provider, whose consent pages the app serves; null with a real provider. */
  sandbox: SandboxProvider | null;
  connections: ConnectionServiceImpl;
  posts: PostServiceImpl;
  webhooks: WebhookServiceImpl;
  /** The delivery log, resends and recoveries of WebhookService. */
  deliveryLog: DeliveryLogServiceImpl;
  /** Resends and recovery jobs, for customers and operators; works on open jobs in the background. */
  recovery: DeliveryRecovery;
  /** Removes delivery data past its retention, in the background. */
  retention: RetentionSweep;
  operator: OperatorServiceImpl;
  events: EventServiceImpl;
  /** The customer portal: its sessions, their internal RPC and its pages. */
  portal: { sessions: PortalSessions; service: PortalServiceImpl; pages: PortalPages };
  principals: PrincipalCache | undefined;
  metrics: Metrics;
  delivery: Deliveries;
  /** What /readyz and the gRPC health service report on; each dependency adds its check here. */
  readiness: ReadinessCheck[];
  /** Takes the instance out of readiness when it begins to shut down. */
  shutdown: ShutdownReadiness;
  /** Stops the delivery engine and releases every pool this built (not an ORM it was given). */
  close(): Promise<void>;
}

export async function createDependencies(options: BuildOptions): Promise<Dependencies> {
  const { config } = options;
  const logger = options.logger ?? createLogger(config.logLevel);
  const ownsOrm = !options.orm;
  const orm = options.orm ?? (await openDatabase(databaseAt(config.databaseUrl)));
  if (ownsOrm) await migrate(orm);
  const now = options.now ?? Date.now;

  const publicUrl = new PublicUrl(config);
  const sandbox = config.provider.kind === 'sandbox' ? new SandboxProvider(() => publicUrl.get(), config.stateSigningKey) : null;
  const provider =
    config.provider.kind === 'composio'
      ? new ComposioProvider({ baseUrl: config.provider.baseUrl, apiKey: config.provider.apiKey, authConfigIds: config.provider.authConfigIds })
      : (sandbox as SandboxProvider);
  // rate-limiter-flexible wants a pg pool of its own; two connections are plenty for its upserts.
  const limiterPool = new Pool({ connectionString: String(orm.config.get('clientUrl')), max: 2 });
  // An idle client dies when PostgreSQL restarts; without a listener that error would end the process.
  limiterPool.on('error', (error) => logger.warn({ err: error }, 'rate-limit pool lost a connection'));
  const principals = options.cachePrincipals === false ? undefined : new PrincipalCache({ connectionString: String(orm.config.get('clientUrl')), logger });
  await principals?.start();
  const records = new DeliveryRecords({ now, retryIntervalMs: config.delivery.retryIntervalMs, endpointConcurrency: config.delivery.endpointConcurrency });
  const temporal = config.temporal ? createTemporalClient(config.temporal) : null;
  const metrics = new Metrics({ orm, records, engineReachable: temporal?.reachable });
  const delivery = deliveriesFor(config, { orm, logger, now, records, temporal, onEvent: metrics.observeDelivery });
  // Records events and fans them out; the connection and post services record their own in it too.
  const publisher = new EventPublisher({ deliveries: delivery.records, engine: delivery.engine, logger, now });
  const webhooks = new WebhookServiceImpl({
    secrets: new SecretBox(config.secretKeys, config.currentSecretKeyId),
    limiter: new WebhookRateLimiter(limiterPool),
    deliveries: delivery.records,
    engine: delivery.engine,
    events: publisher,
    allowCidrs: config.delivery.allowCidrs,
    logger,
    now,
  });
  const events = new EventServiceImpl(publisher);
  const connections = new ConnectionServiceImpl({
    provider,
    signer: new StateSigner(config.stateSigningKey),
    callbackUrl: () => `${publicUrl.get()}${CALLBACK_PATH}`,
    events: publisher,
    now,
  });
  const posts = new PostServiceImpl(now, publisher);
  const recovery = new DeliveryRecovery({ orm, records: delivery.records, engine: delivery.engine, publisher, logger, now });
  const deliveryLog = new DeliveryLogServiceImpl({ records: delivery.records, recovery });
  const failingEndpoints = new FailingEndpointPause({
    orm,
    deliveries: delivery.records,
    engine: delivery.engine,
    events: publisher,
    logger,
    now,
    options: config.delivery.autoPause,
    onChange: metrics.observeEndpointPause,
  });
  const operator = new OperatorServiceImpl({ now, deliveries: delivery.records, engine: delivery.engine, events: publisher, recovery, logger });
  const portalSessions = new PortalSessions(now);
  const portal = {
    sessions: portalSessions,
    service: new PortalServiceImpl({ sessions: portalSessions, logger }),
    pages: new PortalPages({ orm, sessions: portalSessions, config: config.portal, publicUrl: () => publicUrl.get(), logger }),
  };
  const retention = new RetentionSweep({ orm, records: delivery.records, logger, now, intervalMs: config.retention.sweepIntervalMs, batchSize: config.retention.batchSize, pauseMs: config.retention.batchPauseMs });
  const statistics = new StatisticsRollup({ orm, logger, intervalMs: config.retention.statisticsIntervalMs });
  delivery.embedded?.begin();
  recovery.begin();
  retention.start();
  statistics.start();
  if (config.delivery.autoPause.deadLetters > 0) failingEndpoints.begin();

  const shutdown = new ShutdownReadiness();
  const readiness: ReadinessCheck[] = [
    shutdown,
    databaseReadiness(orm),
    ...(temporal ? [{ name: 'temporal', required: false, probe: temporal.reachable }] : []),
  ];

  return {
    config,
    logger,
    orm,
    publicUrl,
    sandbox,
    connections,
    posts,
    webhooks,
    deliveryLog,
    recovery,
    retention,
    operator,
    events,
    portal,
    principals,
    metrics,
    delivery,
    readiness,
    shutdown,
    async close() {
      await retention.stop();
      await statistics.stop();
      await failingEndpoints.close();
      await recovery.close();
      await delivery.close();
      await principals?.close();
      await limiterPool.end();
      if (ownsOrm) await orm.close();
    },
  };
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
      retryIntervalMs: config.delivery.retryIntervalMs,
      logger: deps.logger,
      onRecovered: () => sweeper.sweepAllNow(),
      reachable: temporal.reachable,
    });
    const sweeper: PendingDeliverySweeper = new PendingDeliverySweeper({ orm: deps.orm, records, engine, logger: deps.logger, ...config.delivery.pendingSweep, now: deps.now });
    sweeper.begin();
    deps.logger.info({ address: config.temporal.address, taskQueue: config.temporal.taskQueue }, 'deliveries run on Temporal');
    return {
      records,
      engine,
      embedded: null,
      reachable: temporal.reachable,
      async close() {
        await sweeper.close();
        await engine.close();
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
