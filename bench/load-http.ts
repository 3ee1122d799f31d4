/**
 * HTTP/1.1 load with autocannon's programmatic API, as a segment server (see child.ts):
 * a warm-up run, then one autocannon run per `run` command, for `seconds` or `amount`
 * requests. Latencies, when asked for, come from autocannon's `response` event (float
 * milliseconds of each 2xx response, not the 1 ms histogram buckets).
 */
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

runMain(async () => {
  const spec = input<HttpLoadInput>();
  await serveSegments({
    warmup: () => (spec.warmupSeconds > 0 ? run(spec, { seconds: spec.warmupSeconds }) : Promise.resolve()),
    async segment(command): Promise<Omit<Segment, 'cpuSeconds'>> {
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
