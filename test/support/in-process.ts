import http from 'node:http';
import { duplexPair } from 'node:stream';
import type { RequestHandler } from '../../src/server/edge/listener';
import type { AppFetch } from './clients';

/**
 * Dispatches a request to the app's HTTP handler without a socket, as Hono's
 * `app.request()` does: Node's HTTP/1.1 client and server talk over an in-memory stream
 * pair, so the plain routes, the REST gateway and Connect see a real request (headers,
 * body, status) and no port is bound. Redirects are returned, not followed.
 */
export function inProcessFetch(handler: RequestHandler): AppFetch {
  const server = http.createServer(handler);
  return async (path, init = {}) => {
    const target = new URL(path, 'http://app.invalid');
    const [clientSide, serverSide] = duplexPair();
    server.emit('connection', serverSide);
    const body = init.body === undefined || init.body === null ? undefined : Buffer.from(init.body as string | Uint8Array);
    const headers: Record<string, string> = { host: 'app.invalid', ...Object.fromEntries(new Headers(init.headers)) };
    if (body) headers['content-length'] = String(body.length);
    try {
      return await new Promise<Response>((resolve, reject) => {
        const request = http.request(
          { createConnection: () => clientSide as never, method: init.method ?? 'GET', path: `${target.pathname}${target.search}`, headers },
          (answer) => {
            const chunks: Buffer[] = [];
            answer.on('data', (chunk: Buffer) => chunks.push(chunk));
            answer.on('error', reject);
            answer.on('end', () => {
              const status = answer.statusCode ?? 500;
              const responseHeaders = new Headers();
              for (const [name, value] of Object.entries(answer.headers)) {
                for (const one of [value ?? []].flat()) responseHeaders.append(name, one);
              }
              // A Response may carry no body with these statuses.
              const content = status === 204 || status === 304 ? null : Buffer.concat(chunks);
              resolve(new Response(content, { status, headers: responseHeaders }));
            });
          },
        );
        request.on('error', reject);
        request.end(body);
      });
    } finally {
      clientSide.destroy();
    }
  };
}
