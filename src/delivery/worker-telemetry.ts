import { createServer } from 'node:net';
import { Runtime } from '@temporalio/worker';

/**
 * Temporal's own worker metrics (schedule-to-start latency, slots available, poll results,
 * sticky cache) beside ours on the worker's /metrics. The SDK's core serves them in
 * Prometheus' format on an address of its own; the worker binds it to a free loopback port
 * and its /metrics appends what that port answers, so one scrape gets both. Must run before
 * the worker's first connection (Runtime.install).
 */
export async function installWorkerTelemetry(): Promise<{ sdkMetrics: () => Promise<string> }> {
  const port = await freeLoopbackPort();
  Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress: `127.0.0.1:${port}`, useSecondsForDurations: true } } } });
  return {
    async sdkMetrics() {
      const answer = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2_000) });
      if (!answer.ok) throw new Error(`the SDK's metrics answered HTTP ${answer.status}`);
      return answer.text();
    },
  };
}

/** A free TCP port on loopback; the core binds it a moment later (a race another process could win fails the start loudly). */
async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
