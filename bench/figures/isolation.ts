/**
 * Figure 10: one customer's burst against another's latency, on each engine. Organization B
 * (one endpoint that answers at once) publishes 20 events, 0.5 s apart; its latency is each
 * event's `PublishEvent` sent → the receiver's arrival, p95 over the 20. Side "alone": only
 * B. Side "with burst": first organization A, 8 endpoints that answer after 9 s (inside the
 * 10 s deadline), publishes a burst of 100 events (800 deliveries); B starts 2 s later. The
 * sides alternate in PAIRS pairs (alone, burst; burst, alone; ...). Goals, on the medians of
 * the pairs: with-burst p95 ≤ 2 × alone p95 and ≤ 250 ms.
 *
 * Figure 10b is the same with A's burst of 10,000 deliveries (1,250 events in calls of 100,
 * one after the other), in 3 pairs: ending a backlog of ten thousand takes minutes on Temporal.
 *
 * Each engine runs as production runs it, its processes of its own beside the bench's: the
 * embedded engine in an API process; Temporal with a development server (fairness on), an
 * API process that starts the workflows and `npm run worker`. A and B's receivers run in the
 * bench process (HTTPS, the test CA). Between sides A's backlog is ended so that "alone" is
 * alone: its endpoints are deleted through the API, its open rows marked failed (bench only:
 * nobody waits for them), on Temporal its running workflows terminated, and the side waits
 * until the attempts A had in flight were answered.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Client as TemporalClient, Connection } from '@temporalio/client';
import { createClient } from '@connectrpc/connect';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { MAX_EVENTS_PER_CALL } from '../../src/events/event';
import { startTemporalDevServer, type DevServer } from '../../scripts/temporal-server';
import { startHttpsReceiver, type HttpsReceiver } from '../../test/support/https-receiver';
import { startServiceProcess, type ServiceProcess } from '../../test/support/service-process';
import { A_ENDPOINTS, A_EVENTS, B_EVENTS, B_EVERY_MS, B_START_AFTER_MS, SLOW_ANSWER_MS } from '../../test/support/noisy-neighbour';
import { benchGrpcTransport } from '../grpc-transport';
import { percentile, sleep, startChild, type Child } from '../lib';
import { PAIRS, addFigure, diagnostics, failedFigure, fmtMs, loadAverageMeter, log, median } from '../harness';
import { INTERNAL_TOKEN, api, createEndpoints, seedTenants, type Context, type Tenant } from '../context';

export const ISOLATION_GOAL_RATIO = 2;
export const ISOLATION_GOAL_P95_MS = 250;
export type Engine = 'embedded' | 'temporal';
const EVENT_TYPE = 'post.held';

const epochNow = () => performance.timeOrigin + performance.now();

/** The engine's processes: the API (its pid for CPU), and on Temporal the server and the worker. */
interface Stack {
  url: string;
  stop(): Promise<void>;
  /** Ends A's backlog on the engine (Temporal: terminates its running workflows). */
  endBacklog(organizationId: string): Promise<void>;
}

async function startStack(ctx: Context, engine: Engine): Promise<Stack> {
  if (engine === 'embedded') {
    const server: Child<{ url: string }> = await startChild<{ url: string }>('server.ts', {}, { env: ctx.serverEnv });
    return { url: server.ready.url, stop: () => server.stop(), endBacklog: async () => undefined };
  }
  const dev: DevServer = await startTemporalDevServer({ uiPort: false });
  const env = { ...ctx.serverEnv, TEMPORAL_ADDRESS: dev.address, TEMPORAL_TASK_QUEUE: `isolation-${randomBytes(4).toString('hex')}`, TEMPORAL_SEARCH_ATTRIBUTES: 'true' };
  let server: Child<{ url: string }> | null = null;
  let worker: ServiceProcess | null = null;
  let connection: Connection | null = null;
  const stop = async () => {
    await worker?.stop();
    await server?.stop();
    await connection?.close();
    await dev.stop();
  };
  try {
    server = await startChild<{ url: string }>('server.ts', {}, { env });
    worker = await startServiceProcess('worker', { ...env, LOG_LEVEL: 'info' });
    connection = await Connection.connect({ address: dev.address });
    const temporal = new TemporalClient({ connection });
    return {
      url: server.ready.url,
      stop,
      async endBacklog(organizationId) {
        const query = `OrganizationId = "${organizationId}" AND ExecutionStatus = "Running"`;
        await temporal.workflowService.startBatchOperation({ namespace: 'default', jobId: randomUUID(), visibilityQuery: query, reason: 'isolation bench: the backlog is not waited for', terminationOperation: {} });
        // Ten thousand take a while to terminate on the development server.
        for (let i = 0; i < 3_000; i++) {
          const running = await temporal.workflow.count(query);
          if (running.count === 0) return;
          await sleep(100);
        }
        throw new Error(`A's workflows still running 5 minutes after their termination`);
      },
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** B's 20 publishes, 0.5 s apart: each one's sent → arrival at B's receiver, in ms. */
async function publishB(stack: Stack, b: Tenant, bReceiver: HttpsReceiver, tag: string): Promise<number[]> {
  const events = createClient(EventService, benchGrpcTransport(stack.url));
  const headers = { authorization: `Bearer ${INTERNAL_TOKEN}` };
  const sent = new Map<string, number>();
  const before = bReceiver.requests.length;
  for (let i = 0; i < B_EVENTS; i++) {
    const eventId = `evt_b_${tag}_${i}_${randomUUID()}`;
    sent.set(eventId, epochNow());
    await events.publishEvent({ organizationId: b.organizationId, eventId, eventType: EVENT_TYPE, payload: { i } }, { headers });
    if (i < B_EVENTS - 1) await sleep(B_EVERY_MS);
  }
  await bReceiver.waitForRequests(before + B_EVENTS, 120_000);
  return bReceiver.requests.slice(before).map((r) => {
    const eventId = (JSON.parse(r.rawBody) as { id: string }).id;
    const at = sent.get(eventId);
    if (at === undefined) throw new Error(`B's receiver got an event of no publish of this side: ${eventId}`);
    return r.receivedAt - at;
  });
}

interface BurstSide {
  latencies: number[];
  /** A's requests that arrived before B's last: A's burst was being sent meanwhile. */
  aArrivedMeanwhile: number;
}

/** A's burst on fresh endpoints, B's 20 two seconds later; then A's backlog ended. */
async function withBurst(ctx: Context, stack: Stack, b: Tenant, bReceiver: HttpsReceiver, round: number, engine: Engine, aEvents: number): Promise<BurstSide> {
  const tenant = Object.values(await seedTenants([`isolationA_${engine}_${round}_${randomBytes(3).toString('hex')}`]))[0]!;
  const receivers = await Promise.all(Array.from({ length: A_ENDPOINTS }, () => startHttpsReceiver({ tls: ctx.tls, respond: () => ({ status: 200, delayMs: SLOW_ANSWER_MS }) })));
  try {
    const endpointIds = await createEndpoints(stack.url, tenant, receivers.map((r) => `${r.url}/hook`), [EVENT_TYPE]);
    const events = createClient(EventService, benchGrpcTransport(stack.url));
    // A's burst in calls of at most MAX_EVENTS_PER_CALL, one after the other, as fast as they answer.
    let recorded = 0;
    for (let from = 0; from < aEvents; from += MAX_EVENTS_PER_CALL) {
      const batch = Array.from({ length: Math.min(MAX_EVENTS_PER_CALL, aEvents - from) }, (_, k) => from + k);
      const burst = await events.publishEvents(
        { events: batch.map((i) => ({ organizationId: tenant.organizationId, eventId: `evt_a_${round}_${i}_${randomUUID()}`, eventType: EVENT_TYPE, payload: { i } })) },
        { headers: { authorization: `Bearer ${INTERNAL_TOKEN}` } },
      );
      recorded += burst.events.length;
    }
    if (recorded !== aEvents) throw new Error(`A's burst recorded ${recorded} of ${aEvents} events`);
    await sleep(B_START_AFTER_MS);
    const latencies = await publishB(stack, b, bReceiver, `burst${round}`);
    const lastB = Math.max(...bReceiver.requests.slice(-B_EVENTS).map((r) => r.receivedAt));
    const aArrivedMeanwhile = receivers.reduce((sum, r) => sum + r.requests.filter((q) => q.receivedAt <= lastB).length, 0);
    // A's backlog ended, so that the next side is B alone.
    for (const id of endpointIds) await api(stack.url, 'DELETE', `/api/v1/webhooks/${id}`, tenant.apiKey);
    await ctx.pool.query(
      `update webhook_deliveries set status = 'failed', last_error = 'isolation bench: backlog ended', lease_until = null
        where organization_id = $1 and status in ('pending', 'retrying', 'held')`,
      [tenant.organizationId],
    );
    const ending = Date.now();
    await stack.endBacklog(tenant.organizationId);
    log(`  A's backlog ended in ${((Date.now() - ending) / 1000).toFixed(1)} s`);
    return { latencies, aArrivedMeanwhile };
  } finally {
    // Closing A's receivers ends the requests A still had open: those attempts fail at once.
    await Promise.all(receivers.map((r) => r.close()));
    await untilNoAttemptOpen(ctx, tenant.organizationId);
  }
}

/** Waits (at most 30 s) until none of the organization's attempts is still running. */
async function untilNoAttemptOpen(ctx: Context, organizationId: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { rows } = await ctx.pool.query<{ open: number }>(
      `select count(*)::int as open from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id
        where d.organization_id = $1 and a.finished_at is null and a.started_at > now() - interval '1 minute'`,
      [organizationId],
    );
    if (rows[0]!.open === 0) return;
    if (Date.now() > deadline) {
      log(`  ${rows[0]!.open} of A's attempts still open 30 s after its backlog ended; going on`);
      return;
    }
    await sleep(100);
  }
}

const p95 = (values: number[]) => percentile([...values].sort((x, y) => x - y), 95);

async function isolationOn(ctx: Context, engine: Engine, aEvents: number, pairs: number): Promise<void> {
  const deliveries = aEvents * A_ENDPOINTS;
  const id = deliveries === A_EVENTS * A_ENDPOINTS ? `isolation_${engine}` : `isolation_${engine}_${deliveries}`;
  const name = `${engine === 'embedded' ? 'Embedded engine' : 'Temporal'}: B's publish → arrival p95 with A's ${deliveries.toLocaleString('en-US')}-delivery burst to 9 s endpoints ÷ B alone`;
  const goal = `≤ ${ISOLATION_GOAL_RATIO} and ≤ ${ISOLATION_GOAL_P95_MS} ms`;
  let stack: Stack | null = null;
  const bReceiver = await startHttpsReceiver({ tls: ctx.tls });
  try {
    log(`${id}: starting the engine's processes`);
    stack = await startStack(ctx, engine);
    const b = Object.values(await seedTenants([`isolationB_${engine}_${randomBytes(3).toString('hex')}`]))[0]!;
    await createEndpoints(stack.url, b, [`${bReceiver.url}/hook`], [EVENT_TYPE]);
    log(`${id}: warm-up`);
    await publishB(stack, b, bReceiver, 'warm');
    const load = loadAverageMeter();
    const alone: number[] = [];
    const burst: number[] = [];
    const meanwhile: number[] = [];
    for (let round = 0; round < pairs; round++) {
      const order = round % 2 === 0 ? ['alone', 'burst'] : ['burst', 'alone'];
      for (const side of order) {
        if (side === 'alone') {
          alone.push(p95(await publishB(stack, b, bReceiver, `alone${round}`)));
          log(`  ${round + 1}/${pairs} alone: B p95 ${fmtMs(alone.at(-1))}`);
        } else {
          const measured = await withBurst(ctx, stack, b, bReceiver, round, engine, aEvents);
          burst.push(p95(measured.latencies));
          meanwhile.push(measured.aArrivedMeanwhile);
          log(`  ${round + 1}/${pairs} with burst: B p95 ${fmtMs(burst.at(-1))}, A's requests arrived by B's last: ${measured.aArrivedMeanwhile}`);
        }
      }
      load.mark();
    }
    const ratios = burst.map((value, r) => value / alone[r]!);
    const withP95 = median(burst);
    const check = (ratio: number) => ratio <= ISOLATION_GOAL_RATIO;
    addFigure({
      id,
      figure: name,
      value: withP95,
      unit: 'ms p95',
      baseline: median(alone),
      baselineUnit: 'ms p95',
      ratios,
      check: (ratio) => check(ratio) && withP95 <= ISOLATION_GOAL_P95_MS,
      goal,
      loadAverage: load.range(),
      detail: { engine, alonePerPair: alone, burstPerPair: burst, aArrivedByBsLast: meanwhile },
    });
    diagnostics.push(
      `isolation, ${engine}: B p95 per pair alone ${alone.map((v) => v.toFixed(1)).join(' / ')} ms, with A's burst ${burst.map((v) => v.toFixed(1)).join(' / ')} ms; ` +
        `A's requests that had arrived by B's last, per pair: ${meanwhile.join(' / ')} (of ${deliveries.toLocaleString('en-US')}: A's burst was being sent throughout)`,
    );
  } catch (error) {
    failedFigure(id, name, goal, error);
  } finally {
    await stack?.stop();
    await bReceiver.close();
  }
}

/** The figure on one engine (`BENCH_ONLY=isolation_embedded` or `isolation_temporal`). */
export async function benchIsolation(ctx: Context, engine: Engine): Promise<void> {
  await isolationOn(ctx, engine, A_EVENTS, PAIRS);
}

/** A's events in the large burst: 10,000 deliveries over its 8 endpoints. */
export const LARGE_BURST_EVENTS = 1_250;
/** Pairs of the large burst: each side's backlog of ten thousand takes minutes to end on Temporal. */
const LARGE_BURST_PAIRS = 3;

/** The same with A's burst of 10,000 deliveries (`BENCH_ONLY=isolation_embedded_10000` or `isolation_temporal_10000`). */
export async function benchIsolationLarge(ctx: Context, engine: Engine): Promise<void> {
  await isolationOn(ctx, engine, LARGE_BURST_EVENTS, Math.min(PAIRS, LARGE_BURST_PAIRS));
}
