/**
 * HTTP/1.1 load with autocannon's programmatic API, as a segment server (see child.ts):
 * a warm-up run, then one autocannon run per `run` command, for `seconds` or `amount`
 * requests. Latencies, when asked for, come from autocannon's `response` event (float
 * milliseconds of each 2xx response, not the 1 ms histogram buckets).
 */
import http from 'node:http';
import autocannon from 'autocannon';
import { input, runMain, serveSegments, type Segment } from './child';

export interface HttpLoadInput {
  url: string;
  connections: number;
  warmupSeconds: number;
  method?: 'GET' | 'POST' | 'DELETE';
  headers?: Record<string, string>;
  body?: string;
  /** A sequence each connection cycles through (autocannon `requests`). */
  requests?: { method: string; path: string; headers?: Record<string, string>; body?: string }[];
}

function run(spec: HttpLoadInput, phase: { seconds?: number; amount?: number }, onLatency?: (ms: number) => void): Promise<autocannon.Result> {
  const options: autocannon.Options = {
    url: spec.url,
    connections: spec.connections,
    ...(phase.amount !== undefined ? { amount: phase.amount } : { duration: phase.seconds ?? 1 }),
    ...(spec.method ? { method: spec.method } : {}),
    ...(spec.headers ? { headers: spec.headers } : {}),
    ...(spec.body !== undefined ? { body: spec.body } : {}),
    ...(spec.requests ? { requests: spec.requests } : {}),
    timeout: 30,
    // A run ends at the first sample after its duration: sample often so a 2.5 s run lasts 2.5 s, not 3.
    sampleInt: 100,
  };
  return new Promise((resolve, reject) => {
    const instance = autocannon(options, (error, result) => (error ? reject(error) : resolve(result)));
    if (onLatency) {
      instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
        if (status >= 200 && status < 300) onLatency(ms);
      });
    }
  });
}

/**
 * Open-loop load at a fixed rate: one request every 1000 / rate ms, evenly spaced (not a
 * burst at the top of each second, as autocannon's rate limiting sends), over keep-alive
 * connections, each latency from sending to the last byte of the answer. A request that
 * would have to wait for a free connection is sent on a new one, so a slow answer does not
 * delay the next request.
 */
async function paced(spec: HttpLoadInput, seconds: number, rate: number): Promise<Omit<Segment, 'cpuSeconds'>> {
  const target = new URL(spec.url);
  const agent = new http.Agent({ keepAlive: true });
  const latencies: number[] = [];
  const statusCodes: Record<string, number> = {};
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let firstError: string | null = null;
  const once = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const req = http.request({ host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, method: spec.method ?? 'GET', headers: spec.headers, agent }, (res) => {
        res.on('data', () => undefined);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          statusCodes[status] = (statusCodes[status] ?? 0) + 1;
          if (status >= 200 && status < 300) {
            ok++;
            latencies.push(Math.round((performance.now() - t0) * 1000) / 1000);
          } else non2xx++;
          resolve();
        });
      });
      req.on('error', (error) => {
        errors++;
        firstError ??= error.message;
        resolve();
      });
      req.end(spec.body);
    });
  const interval = 1000 / rate;
  const total = Math.round(seconds * rate);
  const started = performance.now();
  const pending: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const wait = started + i * interval - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    pending.push(once());
  }
  await Promise.all(pending);
  agent.destroy();
  return { ok, non2xx, errors, seconds: (performance.now() - started) / 1000, firstError, statusCodes, latencies };
}

runMain(async () => {
  const spec = input<HttpLoadInput>();
  await serveSegments({
    warmup: () => (spec.warmupSeconds > 0 ? run(spec, { seconds: spec.warmupSeconds }) : Promise.resolve()),
    async segment(command): Promise<Omit<Segment, 'cpuSeconds'>> {
      if (command.rate !== undefined) return paced(spec, command.seconds ?? 1, command.rate);
      const latencies: number[] = [];
      const onLatency = command.recordLatencies ? (ms: number) => latencies.push(Math.round(ms * 1000) / 1000) : undefined;
      const result = await run(spec, { seconds: command.seconds, amount: command.amount }, onLatency);
      const statusCodes: Record<string, number> = {};
      for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stat.count;
      return {
        ok: result['2xx'],
        non2xx: result.non2xx,
        errors: result.errors + result.timeouts,
        seconds: result.duration,
        firstError: null,
        statusCodes,
        ...(command.recordLatencies ? { latencies } : {}),
      };
    },
    cleanup: async () => undefined,
  });
});
