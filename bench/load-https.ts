/**
 * The reference for the delivery figures, as a segment server (see child.ts): K concurrent
 * loops POSTing a webhook-sized JSON body over HTTPS to the receiver, round-robin over the
 * same paths the engine's endpoints use, on keep-alive connections (K at most), as a
 * client written for throughput would. No database, no signing, no SSRF lookup. The
 * receiver's CA is the trust store.
 */
import https from 'node:https';
import { closedLoop, input, runMain, serveSegments } from './child';

interface Input {
  url: string;
  /** Paths posted to in turn (one per endpoint of the engine's side). */
  paths: string[];
  caPem: string;
  concurrency: number;
  warmupSeconds: number;
  body: string;
}

runMain(async () => {
  const spec = input<Input>();
  const target = new URL(spec.url);
  const agent = new https.Agent({ keepAlive: true, maxSockets: spec.concurrency, ca: [spec.caPem] });
  let next = 0;
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const path = spec.paths[next++ % spec.paths.length]!;
      const req = https.request({
        method: 'POST',
        host: target.hostname,
        port: Number(target.port),
        path,
        headers: {
          'content-type': 'application/json',
          'x-service-timestamp': String(Math.floor(Date.now() / 1000)),
          'x-service-signature': '0'.repeat(64),
          'content-length': String(Buffer.byteLength(spec.body)),
        },
        agent,
      });
      req.on('error', reject);
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
      });
      req.end(spec.body);
    });
  await serveSegments({
    warmup: () => closedLoop(spec.concurrency, spec.warmupSeconds, post),
    segment: (command) => closedLoop(spec.concurrency, command.seconds ?? 1, post),
    cleanup: async () => {
      agent.destroy();
    },
  });
});
