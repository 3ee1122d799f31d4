/**
 * Figures 5 and 5b: embedded engine deliveries/s, 16 and 1,000 endpoints at the receiver
 * (one host and port: one connection pool on each side), timed from the commit of the
 * pending rows' insert to the last one delivered.
 *
 * Goal: ≥ 0.8 × the durable delivery loop (durable-loop.ts), which does for each delivery
 * what the contract requires (claim with SKIP LOCKED, attempt recorded before the request,
 * signed, outcome recorded) with no framework. The keep-alive loop that writes nothing
 * (load-https.ts) is an information row.
 */
import type { Pool } from 'pg';
import { loadConfig } from '../../src/config';
import { randomUUID } from 'node:crypto';
import { startLoad, withCpu } from '../lib';
import type { Segment } from '../child';
import { CONNECTIONS, DELIVERIES, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addThroughputFigure, diagnostics, failedFigure, fmtMs, loadSide, log, requireClean, rounds, withLoads, type Side } from '../harness';
import { DELIVERY_ENDPOINTS, insertPending, type Context, type Tenant } from '../context';
import { sleep } from '../lib';

export const ENGINE_GOAL = 0.8;
/** The engine's second figure: as many endpoints as a large customer has, all at the receiver. */
export const MANY_DELIVERY_ENDPOINTS = 1000;

/** A webhook.test body as the service writes it, for the keep-alive loop's request size. */
export function samplePayload(endpointId: string): string {
  return JSON.stringify({
    id: `evt_${randomUUID().replaceAll('-', '')}`,
    type: 'webhook.test',
    createdAt: new Date().toISOString(),
    data: { endpointId, message: 'This is a test delivery from the publishing platform.' },
  });
}

/** The durable loop's copies of the two delivery tables: the same columns, checks, indexes and foreign keys. */
async function createLoopTables(pool: Pool): Promise<void> {
  await pool.query(`drop table if exists bench_attempts; drop table if exists bench_deliveries;
    create table bench_deliveries (like webhook_deliveries including all);
    create table bench_attempts (like delivery_attempts including all);`);
  const { rows } = await pool.query<{ table: string; def: string }>(
    `select conrelid::regclass::text as table, pg_get_constraintdef(oid) as def from pg_constraint
      where contype = 'f' and conrelid in ('webhook_deliveries'::regclass, 'delivery_attempts'::regclass)`,
  );
  for (const { table, def } of rows) {
    const copy = table === 'webhook_deliveries' ? 'bench_deliveries' : 'bench_attempts';
    await pool.query(`alter table ${copy} add ${def.replace('REFERENCES webhook_deliveries', 'REFERENCES bench_deliveries')}`);
  }
}

let engineRunNumber = 0;

/** Inserts n pending deliveries, round-robin over `endpointIds`, and waits until the engine has delivered all of them. */
async function engineRun(ctx: Context, n: number, tenant: Tenant, endpointIds: string[]): Promise<Omit<Segment, 'cpuSeconds'>> {
  // Statistics as a table in use has them (autovacuum would analyze it within a minute), on both sides: see durable-loop.ts.
  await ctx.pool.query('analyze webhook_deliveries');
  const insertedAt = new Date();
  await insertPending(ctx.pool, 'webhook_deliveries', tenant.organizationId, endpointIds, `evt_bench${++engineRunNumber}_`, insertedAt, n);
  const t0 = Date.now();
  const deadline = t0 + Math.max(60_000, n * 50);
  // This run's rows by (endpoint_id, created_at): the recent-deliveries index, never a scan of the history.
  const mine = `from webhook_deliveries where endpoint_id = any($1::uuid[]) and created_at = $2`;
  for (;;) {
    const { rows } = await ctx.pool.query<{ delivered: number; other: number; last: Date | null }>(
      `select count(*) filter (where status = 'delivered')::int as delivered,
              count(*) filter (where status not in ('delivered', 'pending'))::int as other,
              max(delivered_at) as last ${mine}`,
      [endpointIds, insertedAt],
    );
    const row = rows[0]!;
    if (row.other > 0) {
      const { rows: bad } = await ctx.pool.query(`select status, last_error ${mine} and status not in ('delivered', 'pending') limit 1`, [endpointIds, insertedAt]);
      throw new Error(`${row.other} deliveries did not succeed: ${JSON.stringify(bad[0])}`);
    }
    if (row.delivered === n && row.last) {
      // The service's own clock stamps delivered_at; from the commit of the insert to the last one.
      const seconds = Math.max(0.001, (new Date(row.last).getTime() - t0) / 1000);
      return { ok: n, errors: 0, non2xx: 0, seconds, firstError: null };
    }
    if (Date.now() > deadline) throw new Error(`engine delivered ${row.delivered} of ${n} within ${Math.round((deadline - t0) / 1000)} s`);
    await sleep(50);
  }
}

/** Where an attempt's time goes, from its row's timestamps, over every attempt to these endpoints in `table`. */
async function attemptPhases(pool: Pool, deliveries: string, attempts: string, endpointIds: string[]): Promise<{ startToDispatchMs: number; dispatchToFinishMs: number }> {
  const { rows } = await pool.query<{ startToDispatchMs: number; dispatchToFinishMs: number }>(
    `select avg(extract(epoch from a.dispatched_at - a.started_at) * 1000)::float8 as "startToDispatchMs",
            avg(extract(epoch from a.finished_at - a.dispatched_at) * 1000)::float8 as "dispatchToFinishMs"
       from ${attempts} a join ${deliveries} d on d.id = a.delivery_id
      where d.endpoint_id = any($1::uuid[])`,
    [endpointIds],
  );
  return rows[0]!;
}

function secretKeysOf(ctx: Context): { secretKeys: Record<string, string>; currentKeyId: string } {
  const config = loadConfig(ctx.serverEnv);
  return { secretKeys: Object.fromEntries([...config.secretKeys].map(([id, key]) => [id, key.toString('base64')])), currentKeyId: config.currentSecretKeyId };
}

export async function benchEngine(ctx: Context, tenant: Tenant, endpointIds: string[]): Promise<void> {
  const count = endpointIds.length.toLocaleString('en-US');
  const id = endpointIds.length === DELIVERY_ENDPOINTS ? 'delivery_engine' : `delivery_engine_${endpointIds.length}`;
  const name = `Embedded engine deliveries/s ÷ durable delivery loop, ${count} endpoints`;
  const infoName = `  information: embedded engine deliveries/s ÷ keep-alive HTTPS loop that records nothing, ${count} endpoints`;
  try {
    await createLoopTables(ctx.pool);
    const perSegment = Math.max(10, Math.floor(DELIVERIES / PAIRS));
    const warmup = Math.min(200, perSegment);
    log(`${id}: warm-up of ${warmup} deliveries`);
    const warm = await engineRun(ctx, warmup, tenant, endpointIds);
    log(`  warm-up: ${(warm.ok / warm.seconds).toFixed(1)} deliveries/s`);
    log(`${id}: engine and durable loop ${perSegment} deliveries per segment over ${count} endpoints, keep-alive loop ${CONNECTIONS} concurrent × ${SEGMENT_SECONDS} s, ${PAIRS} rounds`);
    const engine: Side = {
      label: 'engine (deliveries)',
      async segment() {
        const { result, cpuSeconds } = await withCpu(ctx.server.proc.pid, () => engineRun(ctx, perSegment, tenant, endpointIds));
        return { ...result, cpuSeconds };
      },
    };
    const measured = await withLoads(
      [
        () =>
          startLoad('durable-loop.ts', {
            databaseUrl: ctx.serverEnv.DATABASE_URL,
            organizationId: tenant.organizationId,
            endpointIds,
            caPem: ctx.tls.caPem,
            workers: CONNECTIONS,
            warmupDeliveries: warmup,
            ...secretKeysOf(ctx),
          }),
        () =>
          startLoad('load-https.ts', {
            url: ctx.receiver.ready.url,
            paths: endpointIds.map((_, i) => `/hook/${i}`),
            caPem: ctx.tls.caPem,
            concurrency: CONNECTIONS,
            warmupSeconds: WARMUP_SECONDS,
            body: samplePayload(endpointIds[0]!),
          }),
      ],
      ([durable, keepAlive]) =>
        rounds([
          engine,
          loadSide('durable loop (deliveries)', durable!, { amount: perSegment }),
          loadSide('keep-alive loop (requests)', keepAlive!, { seconds: SEGMENT_SECONDS }),
        ]),
    );
    const [a, b, c] = measured.summaries;
    requireClean(b!, 'durable loop');
    requireClean(c!, 'keep-alive loop');
    const phases = await attemptPhases(ctx.pool, 'webhook_deliveries', 'delivery_attempts', endpointIds);
    const loopPhases = await attemptPhases(ctx.pool, 'bench_deliveries', 'bench_attempts', endpointIds);
    diagnostics.push(
      `delivery engine, ${count} endpoints: service ${fmtMs(a!.cpuMsPerOp)} CPU per delivery (${a!.cores?.toFixed(2)} cores busy), durable loop ${fmtMs(b!.cpuMsPerOp)} (${b!.cores?.toFixed(2)} cores), ` +
        `keep-alive loop ${fmtMs(c!.cpuMsPerOp)} per request (${c!.cores?.toFixed(2)} cores); per attempt row (mean), from the attempt row to dispatch and from dispatch to the outcome: ` +
        `engine ${fmtMs(phases.startToDispatchMs)}, ${fmtMs(phases.dispatchToFinishMs)}; durable loop ${fmtMs(loopPhases.startToDispatchMs)}, ${fmtMs(loopPhases.dispatchToFinishMs)}`,
    );
    const detail = { engine: a, durableLoop: b, keepAlive: c, endpoints: endpointIds.length, connections: CONNECTIONS, deliveriesPerSegment: perSegment, phases, loopPhases };
    addThroughputFigure({ id, figure: name, unit: 'deliveries/s', baselineUnit: 'deliveries/s', goal: `≥ ${ENGINE_GOAL}`, check: (r) => r >= ENGINE_GOAL, measured, detail });
    addThroughputFigure({ id: `${id}_keepalive`, figure: infoName, unit: 'deliveries/s', baselineUnit: 'req/s', measured, b: 2 });
  } catch (error) {
    failedFigure(id, name, `≥ ${ENGINE_GOAL}`, error);
  }
}
