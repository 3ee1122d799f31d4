/**
 * `npm run bench:temporal`: the Temporal engine beside the embedded one, in the same run,
 * against the same HTTPS receiver and the same PostgreSQL, with the same service code.
 *
 * For each engine:
 *   - deliveries/s, one event published to 16 endpoints (×25 events) and one to 1,000:
 *     from the first publish's answer to the last arrival;
 *   - publish-to-receiver latency, one publish at a time to one endpoint: p50 and p99;
 *   - a 100-endpoint fan-out's publish call, and a 100-event batch to 8 endpoints: how long
 *     each call takes to answer (once its rows commit; workflow starts follow);
 *   - CPU per delivery: this process (the API, the Temporal worker's activities and the
 *     receiver all run in it, as in the test harness) and, on Temporal, the development server;
 *   - for the two throughput loads: the starts that missed their deadline (the API's
 *     warning; such a delivery waits for the pending sweep unless its workflow started after
 *     all), POSTs beyond one per delivery, and when the slowest delivery arrived.
 *
 * The Temporal server here is the development server on SQLite (scripts/temporal-server.ts),
 * on the same 2 cores as everything else: it is not a production cluster, and its figures
 * say where the time goes on one machine, not what a cluster sustains. No goal is set.
 * The run uses the test harness (test/support: a template database, the run's server, the
 * production workflow bundle) and writes bench/temporal-results.json.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EventService } from '../src/gen/publishing/internal/v1/event_service_pb';
import { createLogger } from '../src/config';
import { SecretBox } from '../src/secrets';
import { subscribedEndpoints } from '../test/support/deliveries';
import globalSetup from '../test/support/global-setup';
import globalTeardown from '../test/support/global-teardown';
import { ENGINES, startEngineApp, type EngineApp, type EngineName } from '../test/support/engines';
import { client } from '../test/support/clients';
import { makeTestTls } from '../test/support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../test/support/https-receiver';
import { testTemporalServerPid } from '../test/support/temporal';

const TOKEN = 'bench-publisher-token-0123456789abcdef0123';
const LATENCY_SAMPLES = Number(process.env.BENCH_TEMPORAL_SAMPLES ?? 50);

/** CPU seconds of a process and every process below it (the dev server runs under a watchdog shell). */
function treeCpuSeconds(pid: number | null): number {
  if (pid === null) return 0;
  // /proc reports CPU time in clock ticks: 100 a second on Linux (USER_HZ).
  const ticks = 100;
  let total = 0;
  const visit = (p: number) => {
    try {
      const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ');
      total += (Number(fields[11]) + Number(fields[12])) / ticks;
      const children = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim();
      for (const child of children ? children.split(' ') : []) visit(Number(child));
    } catch {
      // Gone meanwhile.
    }
  };
  visit(pid);
  return total;
}

function selfCpuSeconds(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** Endpoints subscribed to `eventType`, each at its own path under it, sealed as the app seals them. */
async function subscribe(t: EngineApp, organizationId: string, receiver: HttpsReceiver, count: number, eventType: string): Promise<void> {
  const box = new SecretBox(t.config.secretKeys, t.config.currentSecretKeyId);
  await subscribedEndpoints(t.orm.em.fork(), box, organizationId, { urlPrefix: `${receiver.url}/${eventType}/`, count, eventNames: [eventType] });
}

interface EngineFigures {
  engine: EngineName;
  deliveriesPerSecond16: number;
  deliveriesPerSecond1000: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  fanOut100PublishMs: number;
  /** A PublishEvents call of 100 events to 8 endpoints (800 deliveries): how long until it answers. */
  batch100x8PublishMs: number;
  processCpuMsPerDelivery: number;
  serverCpuMsPerDelivery: number | null;
  /** Per throughput load: starts past their deadline, POSTs beyond one per delivery, seconds from the first publish to the last arrival. */
  missedStarts16: number;
  extraPosts16: number;
  lastArrivalSeconds16: number;
  missedStarts1000: number;
  extraPosts1000: number;
  lastArrivalSeconds1000: number;
}

/** The warning logged when a start failed or missed its deadline (the Temporal engine's background starts, src/delivery/workflow-starts.ts). */
const START_MISSED = 'could not start';

async function measure(engine: EngineName, receiver: HttpsReceiver, caPem: string): Promise<EngineFigures> {
  let missedStarts = 0;
  const logger = createLogger('warn', { write: (line: string) => void (line.includes(START_MISSED) && missedStarts++) });
  const t = await startEngineApp(engine, { INTERNAL_SERVICE_TOKENS: `bench:${TOKEN}`, DELIVERY_EXTRA_CA_PEM: caPem, DELIVERY_CONCURRENCY: '64' }, { logger });
  try {
    const tenant = await t.tenant({ plan: 'command' });
    const events = client(EventService, t.url, 'grpc', TOKEN);
    const run = randomUUID().slice(0, 8);
    const arrivalsOf = (prefix: string) => receiver.requests.filter((r) => r.path.startsWith(prefix)).length;
    const untilArrived = async (prefix: string, n: number) => {
      const deadline = Date.now() + 600_000;
      while (arrivalsOf(prefix) < n) {
        if (Date.now() > deadline) throw new Error(`${engine}: ${arrivalsOf(prefix)} of ${n} arrived at ${prefix}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      return receiver.requests.filter((r) => r.path.startsWith(prefix)).reduce((last, r) => Math.max(last, r.receivedAt), 0);
    };

    // Deliveries/s and CPU, 16 endpoints x 25 events, then one event to 1,000 endpoints.
    const e16 = `bench.e16.${engine}.r${run}`;
    const e1000 = `bench.e1000.${engine}.r${run}`;
    await subscribe(t, tenant.organizationId, receiver, 16, e16);
    await subscribe(t, tenant.organizationId, receiver, 1000, e1000);
    const cpu0 = selfCpuSeconds();
    const server0 = engine === 'temporal' ? treeCpuSeconds(testTemporalServerPid()) : 0;
    let t0 = Date.now();
    await Promise.all(Array.from({ length: 25 }, (_, i) => events.publishEvent({ organizationId: tenant.organizationId, eventId: `${e16}-${i}`, eventType: e16 })));
    const last16 = await untilArrived(`/${e16}/`, 16 * 25);
    const deliveriesPerSecond16 = (16 * 25) / ((last16 - t0) / 1000);
    const lastArrivalSeconds16 = (last16 - t0) / 1000;
    const missedStarts16 = missedStarts;
    const t1000 = Date.now();
    t0 = t1000;
    await events.publishEvent({ organizationId: tenant.organizationId, eventId: `${e1000}-0`, eventType: e1000 });
    const last1000 = await untilArrived(`/${e1000}/`, 1000);
    const deliveriesPerSecond1000 = 1000 / ((last1000 - t0) / 1000);
    const lastArrivalSeconds1000 = (last1000 - t1000) / 1000;
    const missedStarts1000 = missedStarts - missedStarts16;
    await t.idle();
    const extraPosts16 = arrivalsOf(`/${e16}/`) - 16 * 25;
    const extraPosts1000 = arrivalsOf(`/${e1000}/`) - 1000;
    const delivered = 16 * 25 + 1000;
    const processCpuMsPerDelivery = ((selfCpuSeconds() - cpu0) * 1000) / delivered;
    const serverCpuMsPerDelivery = engine === 'temporal' ? ((treeCpuSeconds(testTemporalServerPid()) - server0) * 1000) / delivered : null;

    // Publish-to-receiver latency, one at a time.
    const one = `bench.latency.${engine}.r${run}`;
    await subscribe(t, tenant.organizationId, receiver, 1, one);
    const latencies: number[] = [];
    for (let i = 0; i < LATENCY_SAMPLES; i++) {
      await events.publishEvent({ organizationId: tenant.organizationId, eventId: `${one}-${i}`, eventType: one });
      const answered = Date.now();
      const arrived = await untilArrived(`/${one}/`, i + 1);
      latencies.push(arrived - answered);
    }

    // A 100-endpoint fan-out's publish: it answers once its rows commit.
    const hundred = `bench.f100.${engine}.r${run}`;
    await subscribe(t, tenant.organizationId, receiver, 100, hundred);
    const f0 = performance.now();
    await events.publishEvent({ organizationId: tenant.organizationId, eventId: `${hundred}-0`, eventType: hundred });
    const fanOut100PublishMs = performance.now() - f0;
    await untilArrived(`/${hundred}/`, 100);
    await t.idle();

    // A batch of 100 events to 8 endpoints: the call answers once its rows commit, on either engine.
    const batch = `bench.b100x8.${engine}.r${run}`;
    await subscribe(t, tenant.organizationId, receiver, 8, batch);
    const b0 = performance.now();
    await events.publishEvents({ events: Array.from({ length: 100 }, (_, i) => ({ organizationId: tenant.organizationId, eventId: `${batch}-${i}`, eventType: batch })) });
    const batch100x8PublishMs = performance.now() - b0;
    await untilArrived(`/${batch}/`, 800);
    await t.idle();

    return {
      engine,
      deliveriesPerSecond16,
      deliveriesPerSecond1000,
      latencyP50Ms: percentile(latencies, 50),
      latencyP99Ms: percentile(latencies, 99),
      fanOut100PublishMs,
      batch100x8PublishMs,
      processCpuMsPerDelivery,
      serverCpuMsPerDelivery,
      missedStarts16,
      extraPosts16,
      lastArrivalSeconds16,
      missedStarts1000,
      extraPosts1000,
      lastArrivalSeconds1000,
    };
  } finally {
    await t.close();
  }
}

async function main(): Promise<void> {
  await globalSetup();
  const tls = await makeTestTls();
  const receiver = await startHttpsReceiver({ tls });
  const figures: EngineFigures[] = [];
  try {
    for (const engine of ENGINES) figures.push(await measure(engine, receiver, tls.caPem));
  } finally {
    await receiver.close();
    await globalTeardown();
  }
  const fmt = (n: number | null, digits = 1) => (n === null ? '—' : n.toFixed(digits));
  const rows: [string, (f: EngineFigures) => string][] = [
    ['deliveries/s, 16 endpoints (25 events)', (f) => fmt(f.deliveriesPerSecond16)],
    ['  starts past their 2 s deadline / POSTs beyond one each / last arrival (s)', (f) => `${f.missedStarts16} / ${f.extraPosts16} / ${fmt(f.lastArrivalSeconds16)}`],
    ['deliveries/s, 1,000 endpoints (one event)', (f) => fmt(f.deliveriesPerSecond1000)],
    ['  starts past their 2 s deadline / POSTs beyond one each / last arrival (s)', (f) => `${f.missedStarts1000} / ${f.extraPosts1000} / ${fmt(f.lastArrivalSeconds1000)}`],
    ['publish → receiver p50 (ms)', (f) => fmt(f.latencyP50Ms)],
    ['publish → receiver p99 (ms)', (f) => fmt(f.latencyP99Ms)],
    ['100-endpoint publish call (ms)', (f) => fmt(f.fanOut100PublishMs)],
    ['100 events × 8 endpoints PublishEvents call (ms)', (f) => fmt(f.batch100x8PublishMs)],
    ['CPU/delivery, API + worker + receiver process (ms)', (f) => fmt(f.processCpuMsPerDelivery, 2)],
    ['CPU/delivery, Temporal dev server (ms)', (f) => fmt(f.serverCpuMsPerDelivery, 2)],
  ];
  const load = os.loadavg()[0]!.toFixed(2);
  const lines = [
    `| Figure | ${figures.map((f) => f.engine).join(' | ')} |`,
    `|---|${figures.map(() => '---').join('|')}|`,
    ...rows.map(([name, value]) => `| ${name} | ${figures.map(value).join(' | ')} |`),
  ];
  process.stdout.write(`\n${lines.join('\n')}\n\n${os.cpus().length} cores, load average ${load}; Temporal: the development server on SQLite, not a production cluster.\n`);
  writeFileSync(path.join(__dirname, 'temporal-results.json'), `${JSON.stringify({ date: new Date().toISOString(), loadAverage: Number(load), figures }, null, 2)}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:temporal: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
