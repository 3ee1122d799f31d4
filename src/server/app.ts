import type { AddressInfo } from 'node:net';
import { createConnectRouter, type ConnectRouter, type ConnectRouterOptions } from '@connectrpc/connect';
import type { Logger } from '../config';
import type { MikroORM } from '../db';
import { requestIdFrom } from '../context';
import { clientWentAway, createListener, sendError, type RequestHandler } from './edge';
import { createRpcHandler } from './rpc';
import { RestGateway } from './rest';
import { createDependencies, type BuildOptions, type Deliveries, type Dependencies } from './dependencies';
import { PUBLIC_SERVICES, httpRoutes, routerOptions, routes } from './routes';

export type { BuildOptions, Deliveries } from './dependencies';

/** The app without a socket: what a listener serves, and what in-process tests call. */
export interface BuiltApp {
  deps: Dependencies;
  routes: (router: ConnectRouter) => void;
  routerOptions: ConnectRouterOptions;
  gateway: RestGateway;
  /** Answers one request of either HTTP version: a plain route, the REST gateway, or an RPC on any protocol. */
  handler: RequestHandler;
  /** Stops deliveries and releases the pools (not an ORM passed in). */
  close(): Promise<void>;
}

export interface App {
  /** Base URL of the listener, e.g. http://127.0.0.1:41234 */
  url: string;
  port: number;
  orm: MikroORM;
  logger: Logger;
  gateway: RestGateway;
  delivery: Deliveries;
  /**
   * Shuts down: readiness goes to 503 at once; the listener keeps accepting and serving for
   * `drainMs` (SHUTDOWN_DRAIN_MS on SIGTERM, 0 by default), then stops accepting, answers
   * every request of the connections it accepted, lets in-flight calls finish (up to
   * SHUTDOWN_GRACE_MS), and stops deliveries and the pools.
   */
  close(drainMs?: number): Promise<void>;
}

/** How long in-flight calls may take to finish once the listener stops accepting. */
export const SHUTDOWN_GRACE_MS = 10_000;

/** Composition root: the dependencies, then the routes over them, once; nothing listens yet. */
export async function build(options: BuildOptions): Promise<BuiltApp> {
  const deps = await createDependencies(options);
  const { logger } = deps;
  const serviceRoutes = routes(deps);
  const callOptions = routerOptions(deps);
  const router = createConnectRouter(callOptions);
  serviceRoutes(router);
  const gateway = new RestGateway({
    routes: serviceRoutes,
    routerOptions: callOptions,
    services: PUBLIC_SERVICES.map((s) => s.typeName),
    maxBodyBytes: deps.config.maxBodyBytes,
  });
  const rpc = createRpcHandler({ router, logger });
  const plain = httpRoutes(deps);

  const handler: RequestHandler = (req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const route = plain.get(path);
    if (route && (!route.method || route.method === req.method)) return route.handle(req, res);
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
    rpc(req, res);
  };

  return { deps, routes: serviceRoutes, routerOptions: callOptions, gateway, handler, close: () => deps.close() };
}

/** Builds the app and listens on the configured port (port 0 picks a free one). */
export async function start(options: BuildOptions): Promise<App> {
  const app = await build(options);
  const { config, logger, orm, publicUrl, delivery } = app.deps;
  const listener = createListener(app.handler, { logger });
  await new Promise<void>((resolve, reject) => {
    listener.server.once('error', reject);
    listener.server.listen(config.port, config.host, () => resolve());
  });
  const port = (listener.server.address() as AddressInfo).port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  publicUrl.listeningOn(port);
  logger.info({ url }, 'listening');

  return {
    url,
    port,
    orm,
    logger,
    gateway: app.gateway,
    delivery,
    async close(drainMs = 0) {
      app.deps.shutdown.begin();
      if (drainMs > 0) {
        logger.info({ drainMs }, 'draining: /readyz answers 503; still accepting and serving');
        // A timer may fire up to a millisecond early against the clock (Node times it from the
        // event loop's cached time): the drain lasts the whole of drainMs, never a little less.
        const until = performance.now() + drainMs;
        while (performance.now() < until) await new Promise((resolve) => setTimeout(resolve, Math.ceil(until - performance.now())));
      }
      await listener.shutdown(SHUTDOWN_GRACE_MS);
      await app.close();
    },
  };
}
