import http from 'node:http';
import type { Registry } from 'prom-client';
import type { Logger } from '../config';
import type { MikroORM } from '../db';

/** /metrics, /healthz (alive) and /readyz (database answering and the worker polling). */
export async function serveWorkerEndpoints(options: {
  port: number;
  host: string;
  registry: Registry;
  orm: MikroORM;
  logger: Logger;
  running: () => boolean;
}): Promise<http.Server> {
  const { registry, orm, logger } = options;
  const answer = (res: http.ServerResponse, status: number, type: string, body: string) =>
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) }).end(body);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') return answer(res, 200, 'application/json', '{"status":"ok"}');
    if (path === '/readyz') {
      void orm.em
        .fork()
        .execute('select 1')
        .then(
          () => true,
          () => false,
        )
        .then((database) => {
          const down = [...(database ? [] : ['database']), ...(options.running() ? [] : ['worker'])];
          answer(res, down.length ? 503 : 200, 'application/json', JSON.stringify(down.length ? { status: 'unavailable', down } : { status: 'ready' }));
        });
      return;
    }
    if (path === '/metrics') {
      void registry.metrics().then(
        (text) => answer(res, 200, registry.contentType, text),
        (error: unknown) => {
          logger.warn({ err: error }, 'metrics collection failed');
          answer(res, 503, 'application/json', '{"code":"UNAVAILABLE","message":"Metrics are unavailable."}');
        },
      );
      return;
    }
    answer(res, 404, 'application/json', '{"code":"ROUTE_NOT_FOUND","message":"No such route."}');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  return server;
}

