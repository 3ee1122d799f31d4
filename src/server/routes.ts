import { randomUUID } from 'node:crypto';
import type { ConnectRouter, ConnectRouterOptions, ServiceImpl } from '@connectrpc/connect';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import { SANDBOX_PATH } from '../connections';
import { createAuthGate, createAuthorizeInterceptor } from '../auth';
import { createAuditInterceptor } from '../audit';
import type { DeliveryLogMethods } from '../recovery';
import { Health } from '../gen/grpc/health/v1/health_pb';
import { ConnectionService } from '../gen/publishing/v1/connection_service_pb';
import { WebhookService } from '../gen/publishing/v1/webhook_service_pb';
import { PostService } from '../gen/publishing/v1/post_service_pb';
import { OperatorService } from '../gen/publishing/operator/v1/operator_service_pb';
import { EventService } from '../gen/publishing/internal/v1/event_service_pb';
import { sendError, writeBody, writeJson, type RequestHandler } from './edge';
import {
  createReflectionServices,
  createRefusalAudit,
  createRequestContextInterceptor,
  createRequestGate,
  createStorableTextInterceptor,
  REFLECTION_SERVICES,
  strictUtf8,
  UNAVAILABLE_RETRY_AFTER_SECONDS,
} from './rpc';
import { HealthService, blocking, downDependencies } from './health';
import { openApiDocument } from './rest';
import { CALLBACK_PATH, type Dependencies } from './dependencies';

/** Services under /api/v1 (REST) as well as gRPC and Connect. */
export const PUBLIC_SERVICES = [ConnectionService, WebhookService, PostService] as const;

/**
 * Every RPC the app serves, on every protocol: the listener, the REST gateway and
 * in-process test transports all take their handlers from this one function.
 */
export function routes(deps: Dependencies): (router: ConnectRouter) => void {
  const [ReflectionV1, ReflectionV1alpha] = REFLECTION_SERVICES;
  const reflection = createReflectionServices([Health, ...PUBLIC_SERVICES, OperatorService, ...REFLECTION_SERVICES]);
  const health = new HealthService(deps.readiness, [...PUBLIC_SERVICES.map((s) => s.typeName), OperatorService.typeName, EventService.typeName]);
  return (router) => {
    router.service(Health, health);
    router.service(ConnectionService, deps.connections);
    router.service(WebhookService, webhookService(deps));
    router.service(PostService, deps.posts);
    router.service(OperatorService, deps.operator);
    router.service(EventService, deps.events);
    router.service(ReflectionV1, reflection.v1);
    router.service(ReflectionV1alpha, reflection.v1alpha);
  };
}

/** WebhookService from its two implementations: the endpoint routes and the delivery log's. */
function webhookService(deps: Dependencies): ServiceImpl<typeof WebhookService> {
  const { webhooks, deliveryLog } = deps;
  // Typed so that an RPC neither implements fails to compile.
  const endpointRoutes: Omit<ServiceImpl<typeof WebhookService>, DeliveryLogMethods> = boundMethods(webhooks);
  return {
    ...endpointRoutes,
    listWebhookDeliveries: (req, ctx) => deliveryLog.listWebhookDeliveries(req, ctx),
    getWebhookDelivery: (req, ctx) => deliveryLog.getWebhookDelivery(req, ctx),
    resendWebhookDelivery: (req, ctx) => deliveryLog.resendWebhookDelivery(req, ctx),
    recoverWebhookDeliveries: (req, ctx) => deliveryLog.recoverWebhookDeliveries(req, ctx),
    getWebhookRecovery: (req, ctx) => deliveryLog.getWebhookRecovery(req, ctx),
  };
}

/** The methods of a service class instance, bound to it, as the plain object a router takes. */
function boundMethods<T extends object>(impl: T): T {
  const methods: Record<string, unknown> = {};
  for (const name of Object.getOwnPropertyNames(Object.getPrototypeOf(impl))) {
    const value = (impl as Record<string, unknown>)[name];
    if (name !== 'constructor' && typeof value === 'function') methods[name] = value.bind(impl);
  }
  return methods as T;
}

/** What every call goes through before and around its method: the gate, then the interceptors, outermost first. */
export function routerOptions(deps: Dependencies): ConnectRouterOptions {
  const { config, orm, logger, metrics } = deps;
  return {
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
        principals: deps.principals,
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
    // JSON bodies (Connect, gRPC and gRPC-web +json) that are not UTF-8 are refused, not mended
    // with U+FFFD. connect-es's JSON serialization takes its decoder from these options
    // (createJsonSerialization), though the router's type does not name it; the transport
    // suites pin that it is used (test/server/invalid-utf8.test.ts).
    jsonOptions: { textDecoder: strictUtf8 } as ConnectRouterOptions['jsonOptions'],
    // Compressed requests are read; answers are never compressed (no answer reaches the
    // threshold). RPC callers are internal services on the same network, where gzip of a
    // publish's 30 KB answer cost a quarter of the call's CPU to save a fraction of a
    // millisecond on the wire (bench/README.md, "Where a publish's time goes"); external
    // clients use the REST gateway, which writes its JSON itself, uncompressed.
    acceptCompression: [compressionGzip, compressionBrotli],
    compressMinBytes: Number.POSITIVE_INFINITY,
  };
}

/** A plain HTTP route: answered by path alone, outside the RPC protocols and the gateway. */
export interface HttpRoute {
  /** Only this method is served; any method when absent. */
  method?: string;
  handle: RequestHandler;
}

/** The plain HTTP routes by exact path: probes, metrics, the OAuth callback, the sandbox consent pages, the API description. */
export function httpRoutes(deps: Dependencies): ReadonlyMap<string, HttpRoute> {
  const { logger, metrics, readiness, sandbox } = deps;
  const table = new Map<string, HttpRoute>([
    ['/healthz', { handle: (_req, res) => writeJson(res, 200, '{"status":"ok"}') }],
    [
      '/readyz',
      {
        handle: (_req, res) =>
          void downDependencies(readiness).then((down) => {
            const unavailable = blocking(readiness, down);
            if (unavailable) res.setHeader('retry-after', String(UNAVAILABLE_RETRY_AFTER_SECONDS));
            const status = unavailable ? 'unavailable' : down.length > 0 ? 'degraded' : 'ready';
            writeJson(res, unavailable ? 503 : 200, JSON.stringify({ status, down }));
          }),
      },
    ],
    [
      '/metrics',
      {
        handle: (_req, res) =>
          void metrics.registry.metrics().then(
            (text) => writeBody(res, 200, metrics.registry.contentType, text),
            (error: unknown) => {
              logger.error({ err: error }, 'metrics collection failed');
              sendError(res, 'INTERNAL', 'Metrics are unavailable.', randomUUID());
            },
          ),
      },
    ],
    [CALLBACK_PATH, { handle: (req, res) => showCallback(req.url ?? '/', res) }],
    [
      '/api/v1/openapi.json',
      {
        method: 'GET',
        handle: (_req, res) => {
          try {
            writeJson(res, 200, openApiDocument());
          } catch (error) {
            logger.error({ err: error }, 'openapi.json unavailable');
            sendError(res, 'INTERNAL', 'The API description is unavailable.', randomUUID());
          }
        },
      },
    ],
  ]);
  if (sandbox) {
    for (const path of [SANDBOX_PATH, `${SANDBOX_PATH}/approve`]) table.set(path, { handle: (req, res) => void sandbox.handle(req as never, res as never) });
  }
  return table;
}

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
