/**
 * A customer's webhook endpoint in its own process: HTTPS on 127.0.0.1 with the test
 * certificate, reads each body and answers 200 at once. Reports how many it answered
 * when stopped, and each request to a path under /hook/latency as it arrives (`received`,
 * `at`: epoch milliseconds with the fraction, comparable with the parent's clock; `eventId`:
 * the delivered event's id, so arrivals of concurrent deliveries can be told apart).
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { emit, input, onStop, runMain } from './child';

interface Input {
  keyPem: string;
  certPem: string;
}

runMain(async () => {
  const { keyPem, certPem } = input<Input>();
  let answered = 0;
  const server = https.createServer({ key: keyPem, cert: certPem }, (req, res) => {
    const timed = req.url?.startsWith('/hook/latency') ?? false;
    const chunks: Buffer[] = [];
    if (timed) req.on('data', (chunk: Buffer) => chunks.push(chunk));
    else req.resume();
    req.on('end', () => {
      answered++;
      if (timed) {
        const at = performance.timeOrigin + performance.now();
        emit({ type: 'received', path: req.url, at, eventId: eventIdOf(Buffer.concat(chunks)) });
      }
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
      res.end('ok');
    });
  });
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  onStop(async () => {
    emit({ type: 'stats', answered });
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  emit({ type: 'ready', url: `https://127.0.0.1:${port}`, pid: process.pid });
});

function eventIdOf(body: Buffer): string | null {
  try {
    return (JSON.parse(body.toString('utf8')) as { id?: string }).id ?? null;
  } catch {
    return null;
  }
}
