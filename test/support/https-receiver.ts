/**
 * A real HTTPS server on 127.0.0.1 that plays a customer's webhook endpoint.
 *
 *   const tls = await makeTestTls();
 *   const receiver = await startHttpsReceiver({
 *     tls,
 *     respond: (index) => (index === 0 ? { status: 500 } : { status: 200 }),
 *   });
 *   // ... deliver to `${receiver.url}/hook` ...
 *   const [first] = await receiver.waitForRequests(1);
 *   await receiver.close();
 *
 * `respond` is called once per request, after its body was read, with the request's
 * 0-based index. Actions:
 *   { status, body?, headers?, delayMs? } an ordinary response (default: 200, empty body), after delayMs
 *   'reset'                              the TCP connection is reset, no response
 *   'hang'                               nothing is ever sent back
 *   { drip: { bytes, intervalMs } }      200, then one byte of body every intervalMs
 * Every request is recorded in `requests` whatever the action.
 */
import https from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { TestTls } from './tls';

export type ReceiverAction =
  | { status: number; body?: string; headers?: Record<string, string>; delayMs?: number }
  | 'reset'
  | 'hang'
  | { drip: { bytes: number; intervalMs: number } };

export interface ReceivedRequest {
  method: string;
  path: string;
  /** Node's lower-cased header object. */
  headers: IncomingHttpHeaders;
  /** The body exactly as received, decoded as UTF-8. */
  rawBody: string;
  /** Date.now() when the whole body had arrived. */
  receivedAt: number;
  /** The status sent back, once it was (a reset or a hang never sets it). */
  answered?: number;
}

export interface HttpsReceiver {
  /** https://127.0.0.1:<port>, without a trailing slash. */
  url: string;
  requests: ReceivedRequest[];
  /** Resolves with the recorded requests once at least `n` arrived; rejects after timeoutMs (default 5000). */
  waitForRequests(n: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  /** Drops every open connection (including hanging ones) and stops listening. */
  close(): Promise<void>;
}

export interface ReceiverOptions {
  tls: Pick<TestTls, 'keyPem' | 'certPem'>;
  respond?: (index: number, req: IncomingMessage) => ReceiverAction;
}

export async function startHttpsReceiver(options: ReceiverOptions): Promise<HttpsReceiver> {
  const requests: ReceivedRequest[] = [];
  const waiters = new Set<() => void>();
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const respond: NonNullable<ReceiverOptions['respond']> = options.respond ?? (() => ({ status: 200 }));

  const server = https.createServer({ key: options.tls.keyPem, cert: options.tls.certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const index = requests.length;
      const received: ReceivedRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        rawBody: Buffer.concat(chunks).toString('utf8'),
        receivedAt: Date.now(),
      };
      requests.push(received);
      for (const wake of waiters) wake();

      const action = respond(index, req);
      if (action === 'hang') return;
      if (action === 'reset') {
        // TLSSocket refuses resetAndDestroy (its handle is TLSWrap); the TCP socket under it sends the RST.
        const tcp = (req.socket as unknown as { _parent?: Socket })._parent;
        if (tcp) tcp.resetAndDestroy();
        else req.socket.destroy();
        return;
      }
      if ('drip' in action) {
        // Answered only once the whole body went out: a client that gave up never got a 200.
        res.once('finish', () => (received.answered = 200));
        res.writeHead(200, { 'content-type': 'text/plain' });
        let sent = 0;
        const timer = setInterval(() => {
          if (sent >= action.drip.bytes || res.destroyed) {
            clearInterval(timer);
            timers.delete(timer);
            res.end();
            return;
          }
          res.write('.');
          sent += 1;
        }, action.drip.intervalMs);
        timers.add(timer);
        return;
      }
      const answer = () => {
        if (res.destroyed) return;
        received.answered = action.status;
        res.writeHead(action.status, action.headers);
        res.end(action.body ?? '');
      };
      if (!action.delayMs) return answer();
      const timer = setTimeout(() => {
        timers.delete(timer);
        answer();
      }, action.delayMs);
      timers.add(timer);
    });
  });
  server.on('secureConnection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  // Clients in these tests fail on purpose (bad CA, resets); those are not test failures.
  server.on('tlsClientError', () => {});

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `https://127.0.0.1:${port}`,
    requests,
    waitForRequests(n, timeoutMs = 5000) {
      if (requests.length >= n) return Promise.resolve(requests);
      return new Promise((resolve, reject) => {
        const wake = () => {
          if (requests.length < n) return;
          cleanup();
          resolve(requests);
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`receiver got ${requests.length} of ${n} requests within ${timeoutMs} ms`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(wake);
        };
        waiters.add(wake);
      });
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
