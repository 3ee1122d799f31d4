/**
 * Information: publish-to-receiver latency of the test route. POST
 * /api/v1/webhooks/{id}/test on the service (embedded engine) until the receiver has the
 * whole request, against a raw HTTPS POST (keep-alive) from this process to the same
 * receiver: one request in flight at a time, in PAIRS pairs of blocks, the service's CPU per
 * publish read over its blocks. 120 publishes stay under the organization's 300 test calls a
 * minute. It compared a durable write with a request that records nothing; the pickup
 * figure (pickup.ts) now holds the goal.
 */
import https from 'node:https';
import { percentile, withCpu } from '../lib';
import { PAIRS, addFigure, diagnostics, failedFigure, fmtMs, loadAverageMeter, log, median } from '../harness';
import { api, createEndpoints, type Context } from '../context';
import { samplePayload } from './engine';

const epochNow = () => performance.timeOrigin + performance.now();

/** Arrival time at the receiver (epoch ms, the receiver's clock) of the next request under /hook/latency. */
async function arrival(ctx: Context): Promise<number> {
  return (await ctx.receiver.next<{ at: number }>('received', 30_000)).at;
}

export async function benchTestDelivery(ctx: Context): Promise<void> {
  const block = Math.floor(120 / PAIRS);
  const name = (p: string) => `  information: test route publish-to-receiver latency ${p} ÷ raw HTTPS POST`;
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: [ctx.tls.caPem] });
  try {
    const tenant = ctx.tenants.publish!;
    const [endpointId] = await createEndpoints(ctx.server.ready.url, tenant, [`${ctx.receiver.ready.url}/hook/latency`]);
    const body = samplePayload(endpointId!);
    const answered: number[] = [];
    const publish = async () => {
      const t0 = epochNow();
      const answer = await api(ctx.server.ready.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, tenant.apiKey, '{}');
      answered.push(epochNow() - t0);
      if (answer.status !== 200) throw new Error(`test publish: HTTP ${answer.status} ${answer.text.slice(0, 200)}`);
      return (await arrival(ctx)) - t0;
    };
    const target = new URL(ctx.receiver.ready.url);
    const rawPost = async () => {
      const t0 = epochNow();
      await new Promise<void>((resolve, reject) => {
        const req = https.request(
          { method: 'POST', host: target.hostname, port: Number(target.port), path: '/hook/latency-raw', agent, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } },
          (res) => {
            res.resume();
            res.on('end', resolve);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
      return (await arrival(ctx)) - t0;
    };
    log(`publish_latency: ${PAIRS} pairs of ${block} test publishes and ${block} raw POSTs, one at a time`);
    for (let i = 0; i < 5; i++) {
      await publish();
      await rawPost();
    }
    const service: number[][] = [];
    const raw: number[][] = [];
    let serviceCpu: number | null = 0;
    const load = loadAverageMeter();
    for (let pair = 0; pair < PAIRS; pair++) {
      const runService = async () => {
        const { result, cpuSeconds } = await withCpu(ctx.server.proc.pid, async () => {
          const times: number[] = [];
          for (let i = 0; i < block; i++) times.push(await publish());
          return times;
        });
        serviceCpu = serviceCpu === null || cpuSeconds === null ? null : serviceCpu + cpuSeconds;
        service.push(result.sort((x, y) => x - y));
      };
      const runRaw = async () => {
        const times: number[] = [];
        for (let i = 0; i < block; i++) times.push(await rawPost());
        raw.push(times.sort((x, y) => x - y));
      };
      if (pair % 2 === 0) {
        await runService();
        await runRaw();
      } else {
        await runRaw();
        await runService();
      }
      load.mark();
    }
    answered.sort((x, y) => x - y);
    const cpuPerPublish = serviceCpu === null ? null : (serviceCpu * 1000) / (block * PAIRS);
    const all = (sets: number[][]) => sets.flat().sort((x, y) => x - y);
    diagnostics.push(
      `test route publish-to-receiver: service p50 ${fmtMs(percentile(all(service), 50))}, p99 ${fmtMs(percentile(all(service), 99))}, ${fmtMs(cpuPerPublish)} service CPU per publish ` +
        `(the API call, the delivery and the engine's polling meanwhile); the API call alone answered in p50 ${fmtMs(percentile(answered, 50))}; ` +
        `raw POST p50 ${fmtMs(percentile(all(raw), 50))}, p99 ${fmtMs(percentile(all(raw), 99))}`,
    );
    for (const p of [50, 99] as const) {
      addFigure({
        id: `publish_latency_p${p}`,
        figure: name(`p${p}`),
        value: median(service.map((s) => percentile(s, p))),
        unit: 'ms',
        baseline: median(raw.map((s) => percentile(s, p))),
        baselineUnit: 'ms',
        ratios: service.map((s, i) => percentile(s, p) / percentile(raw[i]!, p)),
        cpu: { value: cpuPerPublish, baseline: null },
        loadAverage: load.range(),
        detail: p === 50 ? { samplesPerBlock: block, serviceMs: service, rawMs: raw, answeredMs: answered } : {},
      });
    }
  } catch (error) {
    failedFigure('publish_latency_p50', name('p50'), '—', error);
  } finally {
    agent.destroy();
  }
}
