import { createHash } from 'node:crypto';

export { createLogger, type Logger } from './logger';
import type { TracingConfig } from '../tracing';
import { tracingConfig } from './tracing';
export type { WorkerConfig } from './worker';
import { workerConfig, type WorkerConfig } from './worker';
import { ATTEMPT_TIMEOUT_LIMIT_MS, DEFAULT_ATTEMPT_TIMEOUT_MS, DEFAULT_ENDPOINT_CONCURRENCY, RETRY_INTERVAL_MS } from '../../workflows/policy';
export type { PortalConfig, PortalTheme } from './portal';
import { portalConfig, type PortalConfig } from './portal';
export type { TemporalConfig, TemporalTlsConfig } from './temporal';
import { loadTemporalConfig, type TemporalConfig } from './temporal';

/**
 * Configuration from the environment, validated once at start. Development
 * defaults let `npm start` run on a fresh machine; production refuses them.
 */
export interface Config {
  env: 'development' | 'test' | 'production';
  port: number;
  host: string;
  /**
   * Public base URL of this service, for the sandbox consent page and the OAuth callback.
   * Null when PUBLIC_URL is unset: the app then uses http://localhost:<the port it bound>.
   */
  publicUrl: string | null;
  /** Empty in development means: local PostgreSQL if it answers, else embedded PGlite. */
  databaseUrl: string;
  /**
   * Where migrations run, logged in as the owner role; empty: where DATABASE_URL (or the
   * development default) says. The service itself never needs it.
   */
  databaseMigrationUrl: string;
  logLevel: string;
  /** Request bodies above this many bytes get 413 PAYLOAD_TOO_LARGE. */
  maxBodyBytes: number;
  /**
   * On SIGTERM, how long the listener keeps accepting and serving with /readyz at 503, so
   * that load balancers stop sending here before it stops accepting (0: stop at once).
   */
  shutdownDrainMs: number;
  /** Key that signs connection-attempt state tokens (HMAC-SHA256). */
  stateSigningKey: Buffer;
  /** Keys that encrypt webhook signing secrets at rest, by key id; `currentKeyId` encrypts new ones. */
  secretKeys: Map<string, Buffer>;
  currentSecretKeyId: string;
  /** Bearer credential of the internal operator service. */
  operatorToken: string;
  /** Credentials of the internal services that publish events (EventService), by caller name. */
  internalServiceTokens: InternalServiceToken[];
  provider: ProviderConfig;
  delivery: DeliveryConfig;
  temporal: TemporalConfig | null;
  retention: RetentionConfig;
  /** `npm run worker`: the port of its /metrics, /healthz and /readyz. */
  workerMetricsPort: number;
  worker: WorkerConfig;
  /** OpenTelemetry traces, from the standard OTEL_* variables (config/tracing.ts); null: off. */
  tracing: TracingConfig | null;
  /** The customer portal (PORTAL_*). */
  portal: PortalConfig;
}

/** The retention sweep's pace (README "Retention and erasure"); the periods are the plans'. */
export interface RetentionConfig {
  /** From the end of one pass to the start of the next. */
  sweepIntervalMs: number;
  /** Rows one statement of the sweep removes at most. */
  batchSize: number;
  /** Pause after a full batch. */
  batchPauseMs: number;
  /** From the end of one statistics roll-up pass to the start of the next (src/delivery/statistics.ts). */
  statisticsIntervalMs: number;
}

export interface InternalServiceToken {
  /** Stored with each event the service publishes. */
  name: string;
  token: string;
}

export type ProviderConfig =
  | { kind: 'sandbox' }
  | { kind: 'composio'; baseUrl: string; apiKey: string; authConfigIds: Record<string, string> };

/** How often the API looks for failing endpoints to pause, and paused ones whose test delivery went through. */
const AUTO_PAUSE_INTERVAL_MS = 60_000;

export interface DeliveryConfig {
  /** CIDRs exempt from the SSRF filter; empty in production. */
  allowCidrs: string[];
  /** Extra PEM CA trusted for outbound TLS, in addition to the system roots. */
  extraCaPem: string | null;
  /** Deadline of one outbound request; at most ATTEMPT_TIMEOUT_LIMIT_MS (workflows/policy.ts). */
  attemptTimeoutMs: number;
  maxResponseBytes: number;
  /** Embedded engine: deliveries one instance works on at once. */
  concurrency: number;
  /** Outbound connections kept open to one receiver (host and port). */
  connectionsPerEndpoint: number;
  /** Attempts one endpoint may have in flight at once, on either engine; at most connectionsPerEndpoint. */
  endpointConcurrency: number;
  /**
   * The automatic pause of a failing endpoint: its last `deadLetters` deliveries all failed,
   * the first `failingForMs` ago at least (at once after a 410 Gone); looked for every
   * `intervalMs` (60 s; only NODE_ENV=test may shorten it). `deadLetters` 0: never.
   */
  autoPause: { deadLetters: number; failingForMs: number; intervalMs: number };
  /** An outbound connection is not reused past this age, so a receiver's DNS change is seen within it. */
  connectionMaxAgeMs: number;
  /** Embedded engine only: how often it looks for due deliveries. */
  pollIntervalMs: number;
  /** The contract's 30 s; only NODE_ENV=test may shorten it (DELIVERY_TEST_RETRY_INTERVAL_MS). */
  retryIntervalMs: number;
  /**
   * Temporal engine: how often the API looks for deliveries still pending (their workflow
   * possibly never started), and how old such a row must be. 5 s and 10 s; only NODE_ENV=test
   * may shorten them (DELIVERY_TEST_PENDING_SWEEP_MS).
   */
  pendingSweep: { intervalMs: number; olderThanMs: number };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

/** Room for a load balancer that checks readiness every second or two to see 503 and stop sending here. */
const DEFAULT_SHUTDOWN_DRAIN_MS = 5_000;

const DEV_STATE_KEY = 'development-state-signing-key-not-for-production';
const DEV_SECRET_KEY = 'development-secret-encryption-key-not-for-production';
const DEV_SECRET_KEY_ID = 'dev';
const DEV_OPERATOR_TOKEN = 'development-operator-token';
/**
 * Temporal engine: the pending sweep's period; a row is swept once pending for two periods.
 * Seconds, so that deliveries an API left unstarted (it died, Temporal was down) go out
 * within seconds; a sweep's start that races the API's own is a no-op.
 */
const PENDING_SWEEP_INTERVAL_MS = 5_000;

const DEV_INTERNAL_SERVICE_TOKENS = 'development:development-internal-service-token-not-for-production';

type Env = Record<string, string | undefined>;

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
  const nodeEnv = (env.NODE_ENV ?? 'development') as Config['env'];
  if (!['development', 'test', 'production'].includes(nodeEnv)) {
    problems.push(`NODE_ENV must be development, test or production (got "${nodeEnv}")`);
  }
  const production = nodeEnv === 'production';

  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return value;
  };

  const secret = (name: string, devDefault: string): string => {
    const raw = env[name];
    if (raw && raw.length < 32) problems.push(`${name} must be at least 32 characters`);
    if (production && (!raw || raw === devDefault)) {
      problems.push(`${name} must be set in production (the development default is refused)`);
    }
    return raw || devDefault;
  };

  const port = int('PORT', 8080, 0, 65535);
  const host = env.HOST || (production ? '0.0.0.0' : '127.0.0.1');
  const publicUrl = env.PUBLIC_URL || null;
  if (publicUrl !== null && !/^https?:\/\//.test(publicUrl)) problems.push('PUBLIC_URL must be an http(s) URL');

  const databaseUrl = env.DATABASE_URL ?? '';
  if (production && !databaseUrl) problems.push('DATABASE_URL must be set in production');
  const databaseMigrationUrl = env.DATABASE_MIGRATION_URL ?? '';
  for (const [name, url] of [['DATABASE_URL', databaseUrl], ['DATABASE_MIGRATION_URL', databaseMigrationUrl]]) {
    if (url && !/^postgres(ql)?:\/\//.test(url)) problems.push(`${name} must be a postgres:// URL`);
  }
  // The point of two URLs is two roles: the service's must not be the one that owns the schema.
  if (production && databaseMigrationUrl && databaseUrl && loginOf(databaseMigrationUrl) === loginOf(databaseUrl)) {
    problems.push('DATABASE_MIGRATION_URL must log in as the owner role and DATABASE_URL as the service role, not both as one');
  }

  const stateSigningKey = Buffer.from(secret('STATE_SIGNING_KEY', DEV_STATE_KEY), 'utf8');
  const operatorToken = secret('OPERATOR_TOKEN', DEV_OPERATOR_TOKEN);
  const internalServiceTokens = internalTokens(env.INTERNAL_SERVICE_TOKENS, production, problems);
  if (internalServiceTokens.some((t) => t.token === operatorToken)) {
    problems.push('INTERNAL_SERVICE_TOKENS must not contain the operator token: the two credentials open different services');
  }

  // SECRET_ENCRYPTION_KEYS="k2:<base64 32 bytes>,k1:<base64 32 bytes>": the first encrypts
  // new secrets; the others still decrypt until `npm run admin -- rotate-secrets` re-encrypts.
  const secretKeys = new Map<string, Buffer>();
  let currentSecretKeyId = '';
  const rawKeys = env.SECRET_ENCRYPTION_KEYS;
  if (rawKeys) {
    for (const entry of rawKeys.split(',').map((s) => s.trim()).filter(Boolean)) {
      const [id, material] = entry.split(':', 2);
      const key = material ? Buffer.from(material, 'base64') : Buffer.alloc(0);
      if (!id || !/^[a-zA-Z0-9_-]{1,32}$/.test(id) || key.length !== 32) {
        problems.push('SECRET_ENCRYPTION_KEYS entries must be "<id>:<base64 of 32 bytes>"');
        continue;
      }
      secretKeys.set(id, key);
      currentSecretKeyId ||= id;
    }
  } else if (production) {
    problems.push('SECRET_ENCRYPTION_KEYS must be set in production');
  }
  // Outside production the development key always decrypts, so secrets sealed before the
  // first SECRET_ENCRYPTION_KEYS was set still open and `rotate-secrets` moves them on.
  // It encrypts only when no key is configured; production never knows it.
  if (!production && !secretKeys.has(DEV_SECRET_KEY_ID)) {
    secretKeys.set(DEV_SECRET_KEY_ID, createHash('sha256').update(DEV_SECRET_KEY).digest());
    currentSecretKeyId ||= DEV_SECRET_KEY_ID;
  }

  let provider: ProviderConfig = { kind: 'sandbox' };
  const providerKind = env.CONNECTION_PROVIDER || (production ? 'composio' : 'sandbox');
  if (providerKind === 'composio') {
    const authConfigIds: Record<string, string> = {};
    for (const pair of (env.COMPOSIO_AUTH_CONFIG_IDS ?? '').split(',').filter(Boolean)) {
      const [toolkit, id] = pair.split('=', 2).map((s) => s.trim());
      if (toolkit && id) authConfigIds[toolkit] = id;
      else problems.push('COMPOSIO_AUTH_CONFIG_IDS entries must be "<toolkit>=<auth config id>"');
    }
    if (!env.COMPOSIO_API_KEY) problems.push('COMPOSIO_API_KEY must be set when CONNECTION_PROVIDER=composio');
    provider = {
      kind: 'composio',
      baseUrl: env.COMPOSIO_BASE_URL || 'https://backend.composio.dev',
      apiKey: env.COMPOSIO_API_KEY ?? '',
      authConfigIds,
    };
  } else if (providerKind === 'sandbox') {
    if (production) problems.push('CONNECTION_PROVIDER=sandbox is for development and tests only');
  } else {
    problems.push(`CONNECTION_PROVIDER must be sandbox or composio (got "${providerKind}")`);
  }

  const allowCidrs = (env.DELIVERY_ALLOW_CIDRS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (production && allowCidrs.length > 0) {
    problems.push('DELIVERY_ALLOW_CIDRS must be empty in production (it bypasses the SSRF filter)');
  }

  const temporal = loadTemporalConfig(env, problems);

  // The activity's start-to-close and the lease are derived from this limit: a longer
  // deadline would let an attempt outlive the time Temporal gives it.
  const attemptTimeoutMs = int('DELIVERY_ATTEMPT_TIMEOUT_MS', DEFAULT_ATTEMPT_TIMEOUT_MS, 100, ATTEMPT_TIMEOUT_LIMIT_MS);
  const config: Config = {
    env: nodeEnv,
    port,
    host,
    publicUrl: publicUrl?.replace(/\/+$/, '') ?? null,
    databaseUrl,
    databaseMigrationUrl,
    logLevel: env.LOG_LEVEL || (nodeEnv === 'test' ? 'silent' : 'info'),
    maxBodyBytes: int('MAX_BODY_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    shutdownDrainMs: int('SHUTDOWN_DRAIN_MS', DEFAULT_SHUTDOWN_DRAIN_MS, 0, 60_000),
    stateSigningKey,
    secretKeys,
    currentSecretKeyId,
    operatorToken,
    internalServiceTokens,
    provider,
    delivery: {
      allowCidrs,
      extraCaPem: env.DELIVERY_EXTRA_CA_PEM || null,
      attemptTimeoutMs,
      maxResponseBytes: int('DELIVERY_MAX_RESPONSE_BYTES', 64 * 1024, 0, 10 * 1024 * 1024),
      pollIntervalMs: int('DELIVERY_POLL_INTERVAL_MS', 1000, 10, 60_000),
      concurrency: int('DELIVERY_CONCURRENCY', 64, 1, 256),
      connectionsPerEndpoint: int('DELIVERY_CONNECTIONS_PER_ENDPOINT', 16, 1, 256),
      endpointConcurrency: int('DELIVERY_ENDPOINT_CONCURRENCY', DEFAULT_ENDPOINT_CONCURRENCY, 1, 256),
      // Svix's five days of continuous failure, and Convoy's ten failures in a row: neither is hasty.
      autoPause: {
        deadLetters: int('DELIVERY_AUTO_PAUSE_DEAD_LETTERS', 10, 0, 1000),
        failingForMs: int('DELIVERY_AUTO_PAUSE_FAILING_MS', 5 * 24 * 3600_000, 0, 90 * 24 * 3600_000),
        intervalMs: AUTO_PAUSE_INTERVAL_MS,
      },
      // Ten minutes at most: longer, a moved receiver (or a name rebound to a forbidden address) keeps getting requests at its old one.
      connectionMaxAgeMs: int('DELIVERY_CONNECTION_MAX_AGE_MS', 60_000, 1000, 600_000),
      retryIntervalMs: RETRY_INTERVAL_MS,
      pendingSweep: { intervalMs: PENDING_SWEEP_INTERVAL_MS, olderThanMs: 2 * PENDING_SWEEP_INTERVAL_MS },
    },
    temporal,
    retention: {
      sweepIntervalMs: int('RETENTION_SWEEP_INTERVAL_MS', 10 * 60_000, 1000, 24 * 60 * 60_000),
      batchSize: int('RETENTION_BATCH_SIZE', 1000, 1, 10_000),
      batchPauseMs: int('RETENTION_BATCH_PAUSE_MS', 100, 0, 60_000),
      statisticsIntervalMs: int('STATISTICS_ROLLUP_INTERVAL_MS', 10_000, 100, 24 * 60 * 60_000),
    },
    workerMetricsPort: int('WORKER_METRICS_PORT', 9464, 0, 65535),
    worker: workerConfig(env, int, problems, attemptTimeoutMs),
    tracing: tracingConfig(env, problems),
    portal: portalConfig(env, problems),
  };
  // An attempt beyond the receiver's connections would wait for one of ours, holding its endpoint's turn unsent.
  if (config.delivery.endpointConcurrency > config.delivery.connectionsPerEndpoint) {
    problems.push(
      `DELIVERY_ENDPOINT_CONCURRENCY (${config.delivery.endpointConcurrency}) must not exceed DELIVERY_CONNECTIONS_PER_ENDPOINT (${config.delivery.connectionsPerEndpoint})`,
    );
  }
  if (env.DELIVERY_TEST_AUTO_PAUSE_SWEEP_MS) {
    if (nodeEnv === 'test') config.delivery.autoPause.intervalMs = int('DELIVERY_TEST_AUTO_PAUSE_SWEEP_MS', AUTO_PAUSE_INTERVAL_MS, 50, AUTO_PAUSE_INTERVAL_MS);
    else problems.push('DELIVERY_TEST_AUTO_PAUSE_SWEEP_MS is honoured only with NODE_ENV=test: failing endpoints are looked for every 60 s');
  }
  if (env.DELIVERY_TEST_RETRY_INTERVAL_MS) {
    if (nodeEnv === 'test') config.delivery.retryIntervalMs = int('DELIVERY_TEST_RETRY_INTERVAL_MS', RETRY_INTERVAL_MS, 1, RETRY_INTERVAL_MS);
    else problems.push('DELIVERY_TEST_RETRY_INTERVAL_MS is honoured only with NODE_ENV=test: the retry interval is fixed at 30 s');
  }
  if (env.DELIVERY_TEST_PENDING_SWEEP_MS) {
    if (nodeEnv === 'test') {
      const intervalMs = int('DELIVERY_TEST_PENDING_SWEEP_MS', PENDING_SWEEP_INTERVAL_MS, 100, PENDING_SWEEP_INTERVAL_MS);
      config.delivery.pendingSweep = { intervalMs, olderThanMs: 2 * intervalMs };
    } else problems.push('DELIVERY_TEST_PENDING_SWEEP_MS is honoured only with NODE_ENV=test: the pending sweep runs every 5 s');
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** The role a PostgreSQL URL logs in as (libpq's default, the OS user, counts as empty). */
function loginOf(url: string): string {
  return URL.canParse(url) ? decodeURIComponent(new URL(url).username) : '';
}

/**
 * INTERNAL_SERVICE_TOKENS="publisher:<token>,scheduler:<token>": one credential per calling
 * service, so each event records which service published it and one can be revoked alone.
 */
function internalTokens(raw: string | undefined, production: boolean, problems: string[]): InternalServiceToken[] {
  const [devDefault] = parseInternalTokens(DEV_INTERNAL_SERVICE_TOKENS);
  if (!raw) {
    if (production) problems.push('INTERNAL_SERVICE_TOKENS must be set in production (the development default is refused)');
    return production ? [] : [devDefault!];
  }
  const tokens = parseInternalTokens(raw);
  const names = new Set<string>();
  const seen = new Set<string>();
  for (const entry of tokens) {
    if (!/^[a-z][a-z0-9_-]{0,62}$/.test(entry.name)) {
      problems.push('INTERNAL_SERVICE_TOKENS entries must be "<name>:<token>" with a lowercase name (a-z, 0-9, _ and -, at most 63)');
    } else if (names.has(entry.name)) problems.push(`INTERNAL_SERVICE_TOKENS names ${entry.name} twice`);
    if (entry.token.length < 32) problems.push(`INTERNAL_SERVICE_TOKENS: the token of ${entry.name || '(no name)'} must be at least 32 characters`);
    if (seen.has(entry.token)) problems.push('INTERNAL_SERVICE_TOKENS gives two services the same token');
    if (production && entry.token === devDefault!.token) problems.push('INTERNAL_SERVICE_TOKENS must not use the development token in production');
    names.add(entry.name);
    seen.add(entry.token);
  }
  return tokens;
}

function parseInternalTokens(raw: string): InternalServiceToken[] {
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const colon = entry.indexOf(':');
      return colon < 0 ? { name: '', token: entry } : { name: entry.slice(0, colon), token: entry.slice(colon + 1) };
    });
}
