/**
 * `npm run bench:temporal-cost`: what a delivery costs on Temporal in the production
 * topology (bench/temporal-topology.ts: the API and the worker each a process of its own, the
 * receiver in this one), on the development server (SQLite file) and on Temporal's own server
 * on PostgreSQL behind mTLS. For each run of the service (a fresh API and worker on a task
 * queue of their own):
 *
 *   - CPU per delivery in our processes (API + worker; the receiver runs here and is not
 *     counted) and in the Temporal server, for a burst (100 endpoints × 4 events at once:
 *     within the per-endpoint cap of 4, so no delivery waits for its endpoint's turn) and
 *     for deliveries one at a time; and what each process uses idle, per second;
 *   - publish → receiver latency, one publish at a time to one endpoint: p50 and p95, and the
 *     time split by step from each delivery's workflow history (start, workflow task,
 *     activity task, attempt);
 *   - with BENCH_TEMPORAL_RATES (deliveries/s, e.g. "50,100,200"): offered loads, each for
 *     BENCH_TEMPORAL_RATE_SECONDS, with deliveries/s achieved, state transitions/s,
 *     StartWorkflowExecution p95 (the API's start, publish to WorkflowExecutionStarted) and
 *     activity schedule-to-start p95.
 *
 * BENCH_TEMPORAL_SERVERS: `dev`, `production` or both (default `dev`). BENCH_TEMPORAL_PAIRS
 * runs (default 5). BENCH_TEMPORAL_VARIANT (JSON of settings for both processes): with it,
 * each pair runs the service without and with those settings, back to back, the order
 * alternating, and the table gives both medians and the median of the pairs' ratios.
 * BENCH_TEMPORAL_SERVER_VARIANT (JSON of dynamic configuration, development server only): the
 * variant runs against a second server with those settings instead (or as well); its key
 * `sqlitePragmas` (a list) sets that server's SQLite pragmas instead (`[]`: the CLI's own).
 * BENCH_TEMPORAL_PROFILE=<dir>: the API and the worker write V8 CPU profiles there
 * (node --cpu-prof), one per process, covering the whole run of the service.
 *
 * Writes bench/temporal-cost-results.<servers>.json. A Temporal server sharing 2 cores with the service,
 * PostgreSQL and the receiver is not a sized cluster: these figures say where the time goes.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { readdirSync, readFileSync } from 'node:fs';
import { processTreeCpuSeconds, stopServiceProcesses } from '../test/support/service-process';
import { startTemporalTarget, startTopology, temporalClient, type ServerKind, type TemporalTarget, type Topology } from './temporal-topology';
import { historySteps, rateFigures, type RateFigures, type Steps } from './temporal-history';

const PAIRS = Number(process.env.BENCH_TEMPORAL_PAIRS ?? 5);
const LATENCY_SAMPLES = Number(process.env.BENCH_TEMPORAL_SAMPLES ?? 30);
const SERVERS = (process.env.BENCH_TEMPORAL_SERVERS ?? 'dev').split(',').map((s) => s.trim()) as ServerKind[];
const VARIANT: Record<string, string> | null = process.env.BENCH_TEMPORAL_VARIANT ? (JSON.parse(process.env.BENCH_TEMPORAL_VARIANT) as Record<string, string>) : null;
const SERVER_VARIANT: Record<string, unknown> | null = process.env.BENCH_TEMPORAL_SERVER_VARIANT ? (JSON.parse(process.env.BENCH_TEMPORAL_SERVER_VARIANT) as Record<string, unknown>) : null;
const VARIED = VARIANT !== null || SERVER_VARIANT !== null;
const PROFILE_DIR = process.env.BENCH_TEMPORAL_PROFILE ?? null;
const RATES = (process.env.BENCH_TEMPORAL_RATES ?? '').split(',').filter(Boolean).map(Number);
const RATE_SECONDS = Number(process.env.BENCH_TEMPORAL_RATE_SECONDS ?? 15);
const BURST_ENDPOINTS = 100;
const BURST_EVENTS = 4;
const BURST = BURST_ENDPOINTS * BURST_EVENTS;
const IDLE_MS = 5_000;

export interface RunFigures {
  variant: 'base' | 'variant';
  /** Our processes' CPU per delivery in the burst: API, worker, both. */
  apiCpuMs: number;
  workerCpuMs: number;
  ourCpuMs: number;
  serverCpuMs: number;
  /** The same, deliveries one at a time (the latency segment). */
  serialOurCpuMs: number;
  serialServerCpuMs: number;
  /** The burst's CPU per delivery (ms) by thread kind, in each process. */
  threads: { api: Record<string, number>; worker: Record<string, number> };
  burstDeliveriesPerSecond: number;
  /** CPU ms per second with nothing to deliver. */
  idleApiMsPerSecond: number;
  idleWorkerMsPerSecond: number;
  idleServerMsPerSecond: number;
  latencyP50Ms: number;
  latencyP95Ms: number;
  /** Medians of each step over the latency samples. */
  steps: Steps;
  rates: RateFigures[];
}

/** CPU seconds of a process's threads by the kind of thread (its name: MainThread, WorkerThread for the workflow sandbox, tokio-runtime-w for the SDK's Rust core, V8Worker for V8's collector and compiler). */
function threadCpuSeconds(pid: number): Record<string, number> {
  const byKind: Record<string, number> = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const kind = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      byKind[kind] = (byKind[kind] ?? 0) + (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      // Gone meanwhile.
    }
  }
  return byKind;
}

/** Per-delivery ms by thread kind between two samples. */
function threadSplit(before: Record<string, number>, after: Record<string, number>, n: number): Record<string, number> {
  return Object.fromEntries(Object.keys(after).map((kind) => [kind, ((after[kind]! - (before[kind] ?? 0)) * 1000) / n]).filter(([, ms]) => (ms as number) > 0));
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}
const median = (values: number[]) => percentile(values, 50);

async function untilArrived(top: Topology, prefix: string, n: number, timeoutMs = 300_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const arrived = top.receiver.requests.filter((r) => r.path.startsWith(prefix));
    if (arrived.length >= n) return arrived.reduce((last, r) => Math.max(last, r.receivedAt), 0);
    if (Date.now() > deadline) throw new Error(`${arrived.length} of ${n} arrived at ${prefix}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** Waits until no workflow of the task queue runs: each delivery's last workflow task is done. */
async function untilClosed(client: Client, taskQueue: string): Promise<void> {
  const deadline = Date.now() + 300_000;
  while ((await client.workflow.count(`TaskQueue = "${taskQueue}" AND ExecutionStatus = "Running"`)).count > 0) {
    if (Date.now() > deadline) throw new Error(`workflows of ${taskQueue} still running after 300 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function runOnce(top: Topology, target: TemporalTarget, client: Client, variant: RunFigures['variant']): Promise<RunFigures> {
  const run = randomUUID().slice(0, 8);
  const taskQueue = `bench-cost-${run}`;
  const nodeOptions = PROFILE_DIR ? `--cpu-prof --cpu-prof-dir=${path.resolve(PROFILE_DIR, `${target.kind}-${variant}-${run}`)}` : undefined;
  const { api, worker } = await top.startService(target, taskQueue, variant === 'variant' ? (VARIANT ?? {}) : {}, nodeOptions);
  try {
    const cpu = () => ({ api: processTreeCpuSeconds(api.pid), worker: processTreeCpuSeconds(worker.pid), server: processTreeCpuSeconds(target.pid() ?? 0) });
    const burst = `cost.burst.r${run}`;
    const one = `cost.one.r${run}`;
    await top.subscribe(burst, BURST_ENDPOINTS);
    await top.subscribe(one, 1);
    // A first delivery warms both processes (connections, the workflow sandbox, JIT) before anything is counted.
    await top.publish(one, `${one}-warm`);
    await untilArrived(top, `/${one}/`, 1);
    await untilClosed(client, taskQueue);

    // Idle: what the processes use with nothing to deliver (pollers, sweeps, metrics).
    const i0 = cpu();
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const i1 = cpu();

    // The burst: 4 events to 100 endpoints at once.
    const threads0 = { api: threadCpuSeconds(api.pid), worker: threadCpuSeconds(worker.pid) };
    const c0 = cpu();
    const t0 = Date.now();
    await Promise.all(Array.from({ length: BURST_EVENTS }, (_, i) => top.publish(burst, `${burst}-${i}`)));
    const last = await untilArrived(top, `/${burst}/`, BURST);
    await untilClosed(client, taskQueue);
    const c1 = cpu();
    const threads = { api: threadSplit(threads0.api, threadCpuSeconds(api.pid), BURST), worker: threadSplit(threads0.worker, threadCpuSeconds(worker.pid), BURST) };
    const per = (a: number, b: number, n: number) => ((b - a) * 1000) / n;

    // One at a time: publish, wait for the arrival and the workflow's end, next.
    const latencies: number[] = [];
    const samples: { workflowId: string; sentAt: number; answeredAt: number; arrivedAt: number }[] = [];
    const s0 = cpu();
    for (let i = 0; i < LATENCY_SAMPLES; i++) {
      const sentAt = Date.now();
      const [deliveryId] = await top.publish(one, `${one}-${i}`);
      const answeredAt = Date.now();
      const arrivedAt = await untilArrived(top, `/${one}/`, i + 2);
      latencies.push(arrivedAt - answeredAt);
      await untilClosed(client, taskQueue);
      const [row] = await top.sql<{ workflow_id: string }>('select workflow_id from webhook_deliveries where id = $1', [deliveryId]);
      samples.push({ workflowId: row!.workflow_id, sentAt, answeredAt, arrivedAt });
    }
    const s1 = cpu();
    const steps = await historySteps(client, samples);

    const rates: RateFigures[] = [];
    for (const rate of RATES) rates.push(await rateFigures(top, client, target, { rate, seconds: RATE_SECONDS, run, taskQueue, ourPids: [api.pid, worker.pid] }));

    return {
      variant,
      apiCpuMs: per(c0.api, c1.api, BURST),
      workerCpuMs: per(c0.worker, c1.worker, BURST),
      ourCpuMs: per(c0.api + c0.worker, c1.api + c1.worker, BURST),
      serverCpuMs: per(c0.server, c1.server, BURST),
      idleApiMsPerSecond: per(i0.api, i1.api, IDLE_MS / 1000),
      idleWorkerMsPerSecond: per(i0.worker, i1.worker, IDLE_MS / 1000),
      idleServerMsPerSecond: per(i0.server, i1.server, IDLE_MS / 1000),
      serialOurCpuMs: per(s0.api + s0.worker, s1.api + s1.worker, LATENCY_SAMPLES),
      serialServerCpuMs: per(s0.server, s1.server, LATENCY_SAMPLES),
      threads,
      burstDeliveriesPerSecond: BURST / ((last - t0) / 1000),
      latencyP50Ms: median(latencies),
      latencyP95Ms: percentile(latencies, 95),
      steps,
      rates,
    };
  } finally {
    await Promise.all([api.stop(), worker.stop()]);
  }
}

const ROWS: [string, (f: RunFigures) => number][] = [
  ['CPU/delivery, API + worker, burst (ms)', (f) => f.ourCpuMs],
  ['  of it the API (ms)', (f) => f.apiCpuMs],
  ['  of it the worker (ms)', (f) => f.workerCpuMs],
  ['CPU/delivery, Temporal server, burst (ms)', (f) => f.serverCpuMs],
  ['CPU/delivery, API + worker, one at a time (ms)', (f) => f.serialOurCpuMs],
  ['CPU/delivery, Temporal server, one at a time (ms)', (f) => f.serialServerCpuMs],
  ['deliveries/s, burst of 400', (f) => f.burstDeliveriesPerSecond],
  ['idle CPU ms/s: API', (f) => f.idleApiMsPerSecond],
  ['idle CPU ms/s: worker', (f) => f.idleWorkerMsPerSecond],
  ['idle CPU ms/s: Temporal server', (f) => f.idleServerMsPerSecond],
  ['publish → receiver p50 (ms)', (f) => f.latencyP50Ms],
  ['publish → receiver p95 (ms)', (f) => f.latencyP95Ms],
  ['  publish call answered (ms after sending)', (f) => f.steps.answered],
  ['  workflow started (ms after sending)', (f) => f.steps.started],
  ['  first workflow task: started → task completed (ms)', (f) => f.steps.workflowTask],
  ['  activity task: scheduled → started (ms)', (f) => f.steps.activityTask],
  ['  attempt: activity started → arrival (ms)', (f) => f.steps.attempt],
  ['  after arrival: → activity completed (ms)', (f) => f.steps.outcome],
  ['  last workflow task: activity completed → workflow completed (ms)', (f) => f.steps.lastTask],
];

async function main(): Promise<void> {
  const top = await startTopology();
  const results: { server: ServerKind; runs: RunFigures[] }[] = [];
  try {
    for (const kind of SERVERS) {
      const target = await startTemporalTarget(kind);
      const client = await temporalClient(target);
      const other = SERVER_VARIANT ? await startTemporalTarget(kind, SERVER_VARIANT) : null;
      const otherClient = other ? await temporalClient(other) : null;
      const runs: RunFigures[] = [];
      try {
        for (let pair = 0; pair < PAIRS; pair++) {
          const order: RunFigures['variant'][] = VARIED ? (pair % 2 === 0 ? ['base', 'variant'] : ['variant', 'base']) : ['base'];
          for (const variant of order) {
            const on = variant === 'variant' && other ? { target: other, client: otherClient! } : { target, client };
            const figures = await runOnce(top, on.target, on.client, variant);
            runs.push(figures);
            process.stderr.write(`${kind} ${variant} pair ${pair + 1}: our CPU ${figures.ourCpuMs.toFixed(2)} ms/delivery, p50 ${figures.latencyP50Ms} ms, load ${os.loadavg()[0]!.toFixed(2)}\n`);
          }
        }
      } finally {
        await client.connection.close();
        await otherClient?.connection.close();
        await target.stop();
        await other?.stop();
      }
      results.push({ server: kind, runs });
    }
  } finally {
    await stopServiceProcesses();
    await top.close();
  }
  const load = os.loadavg()[0]!.toFixed(2);
  const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : 1) : '—');
  const lines: string[] = [];
  for (const { server, runs } of results) {
    const base = runs.filter((r) => r.variant === 'base');
    const variant = runs.filter((r) => r.variant === 'variant');
    const varied = [VARIANT && `settings ${JSON.stringify(VARIANT)}`, SERVER_VARIANT && `server ${JSON.stringify(SERVER_VARIANT)}`].filter(Boolean).join(', ');
    lines.push(`\n${server} server, ${base.length} run(s)${VARIED ? ` against ${variant.length} with ${varied}` : ''}:`);
    lines.push(VARIED ? '| Figure | base (median) | variant (median) | variant ÷ base (median of pairs) |' : '| Figure | median | min – max |');
    lines.push(VARIED ? '|---|---|---|---|' : '|---|---|---|');
    for (const [name, value] of ROWS) {
      const b = base.map(value);
      if (VARIED) {
        const v = variant.map(value);
        lines.push(`| ${name} | ${fmt(median(b))} | ${fmt(median(v))} | ${fmt(median(b.map((x, i) => v[i]! / x)))} |`);
      } else {
        lines.push(`| ${name} | ${fmt(median(b))} | ${fmt(Math.min(...b))} – ${fmt(Math.max(...b))} |`);
      }
    }
    for (const proc of ['api', 'worker'] as const) {
      const kinds = [...new Set(base.flatMap((r) => Object.keys(r.threads[proc])))].sort();
      lines.push(`| ${proc} CPU/delivery by thread (ms, median) | ${kinds.map((k) => `${k} ${fmt(median(base.map((r) => r.threads[proc][k] ?? 0)))}`).join(', ')} | |`);
    }
    for (const r of base[0]?.rates ?? []) {
      const same = base.map((run) => run.rates.find((x) => x.offered === r.offered)!);
      lines.push(
        `| offered ${r.offered}/s: delivered/s, state transitions/s, start p95, activity schedule-to-start p95, server CPU ms/delivery | ` +
          `${fmt(median(same.map((x) => x.deliveredPerSecond)))}, ${fmt(median(same.map((x) => x.transitionsPerSecond)))}, ${fmt(median(same.map((x) => x.startP95Ms)))} ms, ${fmt(median(same.map((x) => x.scheduleToStartP95Ms)))} ms, ${fmt(median(same.map((x) => x.serverCpuMs)))} | |`,
      );
    }
  }
  process.stdout.write(`${lines.join('\n')}\n\n${os.cpus().length} cores, load average ${load} at the end.\n`);
  writeFileSync(path.join(__dirname, `temporal-cost-results.${SERVERS.join('+')}.json`), `${JSON.stringify({ date: new Date().toISOString(), loadAverage: Number(load), variant: VARIANT, serverVariant: SERVER_VARIANT, results }, null, 2)}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:temporal-cost: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
