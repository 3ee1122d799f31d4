/**
 * Figure 6: server RSS after MEMORY_LARGE mixed requests ÷ after MEMORY_SMALL, on a fresh
 * server process, then MEMORY_SECONDS more of the same mix. Goal: growth ≤ 10%. One
 * measurement (a pair would need a fresh server per side): its row has no spread.
 */
import { randomUUID } from 'node:crypto';
import { sleep, startChild, withCpu, type Child } from '../lib';
import type { HttpLoadInput } from '../load-http';
import { CONNECTIONS, MEMORY_LARGE, MEMORY_SECONDS, MEMORY_SMALL, SERVER_NODE_ARGS, addFigure, diagnostics, failedFigure, httpLoad, log, summarize, withLoads, type Measured } from '../harness';
import { scrapeMetrics, type Context, type Tenant } from '../context';


/**
 * The memory mix, cycled by every connection: reads and writes of webhooks, connection
 * lists over REST and Connect, and errors (validation, not found, bad key, no key, no
 * route, malformed JSON). The webhook list asks for 10 per page so that the endpoints
 * this mix keeps creating do not make it the whole cost.
 */
function mixedRequests(tenant: Tenant, receiverUrl: string): NonNullable<HttpLoadInput['requests']> {
  const auth = { authorization: `Bearer ${tenant.apiKey}` };
  const json = { ...auth, 'content-type': 'application/json' };
  return [
    { method: 'GET', path: '/api/v1/webhooks?pageSize=10', headers: auth },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: JSON.stringify({ url: `${receiverUrl}/hook/mem`, eventNames: ['webhook.test'] }) },
    { method: 'GET', path: '/api/v1/connections', headers: auth },
    { method: 'POST', path: '/publishing.v1.ConnectionService/ListConnections', headers: json, body: '{}' },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: JSON.stringify({ url: 'http://example.com/not-https' }) },
    { method: 'DELETE', path: `/api/v1/webhooks/${randomUUID()}`, headers: auth },
    { method: 'GET', path: '/api/v1/connections', headers: { authorization: 'Bearer pk_live_not-a-real-key' } },
    { method: 'GET', path: '/api/v1/no-such-route', headers: auth },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: '{"url": ' },
    { method: 'GET', path: '/api/v1/webhooks', headers: {} },
  ];
}

export async function benchMemory(ctx: Context): Promise<void> {
  const id = 'memory_growth';
  const name = `Server RSS after ${MEMORY_LARGE.toLocaleString('en-US')} ÷ after ${MEMORY_SMALL.toLocaleString('en-US')} mixed requests`;
  let server: Child<{ url: string }> | null = null;
  try {
    // A fresh server process, so "after 10,000" is not after the other benchmarks' traffic.
    server = await startChild<{ url: string }>('server.ts', {}, { env: ctx.serverEnv, nodeArgs: SERVER_NODE_ARGS });
    const url = server.ready.url;
    const pid = server.proc.pid;
    const requests = mixedRequests(ctx.tenants.mem!, ctx.receiver.ready.url);
    const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
    const sample = async (done: number) => {
      await sleep(500);
      const [rss, heapUsed, heapTotal, external] = await scrapeMetrics(url, [
        'process_resident_memory_bytes',
        'nodejs_heap_size_used_bytes',
        'nodejs_heap_size_total_bytes',
        'nodejs_external_memory_bytes',
      ]);
      const point = { requests: done, rssMiB: mib(rss!), heapUsedMiB: mib(heapUsed!), heapTotalMiB: mib(heapTotal!), externalMiB: mib(external!) };
      log(`  after ${done.toLocaleString('en-US')}: RSS ${point.rssMiB} MiB, heap ${point.heapUsedMiB}/${point.heapTotalMiB} MiB, external ${point.externalMiB} MiB`);
      return point;
    };
    log(`${id}: fresh server, ${requests.length}-request mix, ${CONNECTIONS} connections`);
    const trajectory = [await sample(0)];
    const parts: Measured[] = [];
    let afterSustained: Awaited<ReturnType<typeof sample>> | null = null;
    await withLoads([httpLoad({ url, connections: CONNECTIONS, warmupSeconds: 0, requests })], async ([load]) => {
      const rest = MEMORY_LARGE - MEMORY_SMALL;
      // The first part is the baseline; the rest in three parts, for the trajectory.
      for (const amount of [MEMORY_SMALL, Math.floor(rest / 3), Math.floor(rest / 3), rest - 2 * Math.floor(rest / 3)]) {
        if (amount <= 0) continue;
        const { result, cpuSeconds } = await withCpu(pid, () => load!.run({ amount }));
        const answered = result.ok + result.non2xx;
        log(`  mixed ×${amount.toLocaleString('en-US')}: ${answered} answered (${result.non2xx} of them errors by design) in ${result.seconds.toFixed(1)} s`);
        if (result.errors > 0 || answered !== amount) throw new Error(`${answered} of ${amount} answered, ${result.errors} errors`);
        parts.push({ ...result, cpuSeconds });
        trajectory.push(await sample(trajectory.at(-1)!.requests + amount));
      }
      const sustained = await load!.run({ seconds: MEMORY_SECONDS });
      log(`  mixed for ${MEMORY_SECONDS} s: ${sustained.ok + sustained.non2xx} answered, ${sustained.errors} errors`);
      if (sustained.errors > 0) throw new Error(`${sustained.errors} errors in the ${MEMORY_SECONDS} s mixed load`);
      afterSustained = await sample(trajectory.at(-1)!.requests + sustained.ok + sustained.non2xx);
    });
    const small = trajectory[1]!;
    const large = trajectory.at(-1)!;
    const ratio = large.rssMiB / small.rssMiB;
    const summary = summarize(parts);
    diagnostics.push(
      `memory: ${trajectory.map((t) => `${t.requests / 1000}k → RSS ${t.rssMiB} MiB (heap ${t.heapUsedMiB}/${t.heapTotalMiB})`).join(', ')}; ` +
        `then ${MEMORY_SECONDS} s more of the mix (${afterSustained!.requests.toLocaleString('en-US')} requests in all) → RSS ${afterSustained!.rssMiB} MiB (heap ${afterSustained!.heapUsedMiB}/${afterSustained!.heapTotalMiB})`,
    );
    addFigure({
      id,
      figure: name,
      value: large.rssMiB,
      unit: 'MiB',
      baseline: small.rssMiB,
      baselineUnit: 'MiB',
      ratios: ratio - 1,
      ratioLabel: 'growth',
      goal: '≤ 10%',
      check: (g) => g <= 0.1,
      detail: { ratio, trajectory, afterSustained, sustainedSeconds: MEMORY_SECONDS, statusCodes: summary.statusCodes, serverCpuMsPerRequest: summary.cpuMsPerOp, mix: requests.map((r) => `${r.method} ${r.path}`) },
    });
  } catch (error) {
    failedFigure(id, name, '≤ 10%', error);
  } finally {
    await server?.stop();
  }
}
