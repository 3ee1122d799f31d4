/**
 * The reference for the delivery figure, as a segment server (see child.ts): K concurrent loops POSTing a webhook-sized JSON
 * body to the receiver over HTTPS, each request on a fresh keep-alive-free agent (one TLS
 * connection per request), as the delivery engine's outbound client does. No database,
 * no signing, no SSRF lookup. The receiver's CA is the trust store.
 */
import https from 'node:https';
import tls from 'node:tls';
import { closedLoop, input, runMain, serveSegments } from './child';

interface Input {
  url: string;
  caPem: string;
  concurrency: number;
  warmupSeconds: number;
  body: string;
  /**
   * Trust the default roots plus the test CA, as the engine's outbound client does (a
   * secure context built from ~150 certificates per connection); otherwise just the CA.
   */
  withDefaultRoots: boolean;
}

runMain(async () => {
  const spec = input<Input>();
  const target = new URL(spec.url);
  const ca = spec.withDefaultRoots ? [...tls.getCACertificates('default'), spec.caPem] : [spec.caPem];
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const agent = new https.Agent({ keepAlive: false });
      const req = https.request({
        method: 'POST',
        host: target.hostname,
        port: Number(target.port),
        path: target.pathname,
        headers: {
          'content-type': 'application/json',
          'x-service-timestamp': String(Math.floor(Date.now() / 1000)),
          'x-service-signature': '0'.repeat(64),
          'content-length': String(Buffer.byteLength(spec.body)),
        },
        agent,
        ca,
      });
      req.on('error', (error) => {
        agent.destroy();
        reject(error);
      });
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => {
          req.destroy();
          agent.destroy();
          if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
          else resolve();
        });
      });
      req.end(spec.body);
    });
  await serveSegments({
    warmup: () => closedLoop(spec.concurrency, spec.warmupSeconds, post),
    segment: (command) => closedLoop(spec.concurrency, command.seconds ?? 1, post),
    cleanup: async () => undefined,
  });
});
