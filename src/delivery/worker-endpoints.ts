import http from 'node:http';
import type { Registry } from 'prom-client';
import type { Logger } from '../config';
import type { MikroORM } from '../db';

/** /metrics (ours, then Temporal's SDK metrics), /healthz (alive) and /readyz (database answering and the worker polling). */
export async function serveWorkerEndpoints(options: {
  port: number;
  host: string;
  registry: Registry;
  orm: MikroORM;
  logger: Logger;
  running: () => boolean;
  /** More metrics in Prometheus' text format, appended after ours (Temporal's SDK metrics). */
  more?: () => Promise<string>;
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
      // Ours are served even when the SDK's do not answer.
      const more = options.more?.().catch((error: unknown) => {
        logger.warn({ err: error }, "Temporal's SDK metrics are unavailable");
        return '';
      });
      void Promise.all([registry.metrics(), more])
        .then(([ours, sdk]) => (sdk ? `${ours.trimEnd()}\n${sdk}` : ours))
        .then(
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

