/**
 * Figure 2: GET /api/v1/webhooks for an organization of 50 endpoints, each showing its five
 * newest deliveries (250 in the answer), after HISTORY_ROWS older delivery rows.
 *
 * Goal (2b): throughput ÷ the bare node:http + pg server answering the same list (the same
 * two statements, JSON.stringify) ≥ 0.8.
 *
 * Information rows, in the same rounds (each side saturated for half a segment, then at half
 * of that throughput, evenly paced, for a segment):
 * - latency ÷ an organization with the same 50 endpoints and no deliveries (the "250 ÷ none"
 *   goal this figure had: it compares two different answers, 137 KB against 7.7 KB);
 * - the same at saturation (16 connections, closed loop: the ratio of CPU per request);
 * - latency ÷ a twin organization whose only deliveries are copies of the same 250: the
 *   same answer, from an organization with ~500,000 rows and from one with 250.
 */
import { CONNECTIONS, HISTORY_ROWS, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addFigure, addThroughputFigure, diagnostics, failedFigure, fmtMs, httpLoad, latencyRatios, loadSide, log, requireClean, rounds, summarize, withLoads, describe, type Measured, type Side } from '../harness';
import type { Load, Child } from '../lib';
import { DELIVERY_COLUMNS, LIST_ENDPOINTS, OTHER_ENDPOINTS_PER_ORG, OTHER_ORGS, api, expectOk, startBareRest, type Context, type Tenant } from '../context';

export const LIST_GOAL = 0.8;

/**
 * Latency is taken at an offered load of this fraction of the capacity measured just
 * before, in the same segment: the time one request takes at a known utilisation, not the
 * queue in front of a server that a busier machine has saturated (that queue, 16 ÷
 * throughput, is reported apart as "saturated").
 */
export const LOAD_FRACTION = 0.5;

/** Checks an organization's list: all 50 endpoints, each with `recentEach` deliveries; returns the answer's size. */
async function checkListShape(ctx: Context, tenant: Tenant, recentEach: number): Promise<number> {
  const body = await expectOk(api(ctx.server.ready.url, 'GET', '/api/v1/webhooks', tenant.apiKey), 'list webhooks');
  const endpoints = body.endpoints as { recentDeliveries?: unknown[] }[];
  if (endpoints.length !== LIST_ENDPOINTS) throw new Error(`list answered ${endpoints.length} endpoints, expected ${LIST_ENDPOINTS}`);
  const wrong = endpoints.filter((e) => (e.recentDeliveries ?? []).length !== recentEach).length;
  if (wrong > 0) throw new Error(`${wrong} endpoints do not show ${recentEach} recent deliveries`);
  return JSON.stringify(body).length;
}

function listLoad(ctx: Context, tenant: Tenant, warmupSeconds: number): () => Promise<Load> {
  return httpLoad({ url: `${ctx.server.ready.url}/api/v1/webhooks`, connections: CONNECTIONS, warmupSeconds, headers: { authorization: `Bearer ${tenant.apiKey}` } });
}

/** A side whose segment is SEGMENT_SECONDS / 2 saturated (kept in `saturated`), then SEGMENT_SECONDS at LOAD_FRACTION of that throughput (the segment). */
function pacedSide(ctx: Context, load: Load, label: string, saturated: Measured[]): Side {
  const pid = ctx.server.proc.pid;
  return {
    label,
    async segment() {
      const full = await loadSide(label, load, { seconds: SEGMENT_SECONDS / 2, recordLatencies: true }, pid).segment();
      saturated.push(full);
      const rate = Math.max(1, Math.round((LOAD_FRACTION * full.ok) / full.seconds));
      const paced = await loadSide(label, load, { seconds: SEGMENT_SECONDS, rate, recordLatencies: true }, pid).segment();
      log(`    ${label} saturated: ${describe(full)}; paced at ${rate}/s`);
      return paced;
    },
  };
}

export async function insertHistory(ctx: Context): Promise<{ seconds: number; analyzeSeconds: number; rows: number }> {
  const endpoints = [...ctx.listEndpointIds.map((id) => ({ organizationId: ctx.tenants.list!.organizationId, id })), ...ctx.otherEndpoints];
  const t0 = performance.now();
  // One statement: terminal statuses only (the engine must not pick any up), spread
  // round-robin over the endpoints and back in time over ~3 months.
  await ctx.pool.query(
    `insert into webhook_deliveries ${DELIVERY_COLUMNS}
     select gen_random_uuid(), e.org, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
              || '","data":{"endpointId":"' || e.id || '","message":"This is a test delivery from the publishing platform."}}',
            e.status, e.attempts, null,
            case when e.status = 'delivered' then null else 'The endpoint answered HTTP 500.' end,
            case when e.status = 'delivered' then 200 else 500 end,
            'webhook-delivery/' || e.org || '/' || e.id || '/' || e.evt, null,
            case when e.status = 'delivered' then e.at + interval '200 milliseconds' else null end,
            e.at, e.at + interval '1 second'
       from (
         select ($1::uuid[])[1 + g % cardinality($1::uuid[])] as org,
                ($2::uuid[])[1 + g % cardinality($2::uuid[])] as id,
                'evt_hist' || lpad(g::text, 8, '0') as evt,
                case when g % 50 = 0 then 'dead_lettered' when g % 20 = 0 then 'failed' else 'delivered' end as status,
                case when g % 50 = 0 then 8 else 1 + (g % 3) end as attempts,
                now() - interval '1 hour' - g * interval '8 seconds' as at
           from generate_series(1, $3::int) g
       ) e`,
    [endpoints.map((e) => e.organizationId), endpoints.map((e) => e.id), HISTORY_ROWS],
  );
  const seconds = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  await ctx.pool.query('analyze webhook_deliveries');
  return { seconds, analyzeSeconds: (performance.now() - t1) / 1000, rows: HISTORY_ROWS };
}

/** Gives the twin organization's endpoints copies of the listed endpoints' five newest deliveries: the same answer, no history. */
async function copyNewestToTwin(ctx: Context): Promise<number> {
  const { rowCount } = await ctx.pool.query(
    `insert into webhook_deliveries ${DELIVERY_COLUMNS}
     select gen_random_uuid(), $1::uuid, m.twin, d.event_id, d.event_type, d.payload, d.status, d.attempt_count, d.next_attempt_at,
            d.last_error, d.last_response_status, d.workflow_id, null, d.delivered_at, d.created_at, d.updated_at
       from unnest($2::uuid[], $3::uuid[]) as m(listed, twin)
       cross join lateral (select * from webhook_deliveries w where w.endpoint_id = m.listed
                            order by w.created_at desc, w.id desc limit 5) d`,
    [ctx.tenants.twin!.organizationId, ctx.listEndpointIds, ctx.twinEndpointIds],
  );
  await ctx.pool.query('analyze webhook_deliveries');
  return rowCount ?? 0;
}

/** The five newest deliveries of every listed endpoint, newer than any history row. */
async function insertRecent(ctx: Context): Promise<number> {
  const organizationId = ctx.tenants.list!.organizationId;
  const { rowCount } = await ctx.pool.query(
    `insert into webhook_deliveries ${DELIVERY_COLUMNS}
     select gen_random_uuid(), $1::uuid, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
              || '","data":{"endpointId":"' || e.id || '","message":"This is a test delivery from the publishing platform."}}',
            'delivered', 1, null, null, 200, 'webhook-delivery/' || $1::text || '/' || e.id || '/' || e.evt, null,
            e.at + interval '200 milliseconds', e.at, e.at + interval '1 second'
       from (select ep.id, 'evt_recent' || n || '_' || replace(ep.id::text, '-', '') as evt, now() - interval '1 minute' - n * interval '1 second' as at
               from unnest($2::uuid[]) as ep(id) cross join generate_series(1, 5) n) e`,
    [organizationId, ctx.listEndpointIds],
  );
  await ctx.pool.query('analyze webhook_deliveries');
  return rowCount ?? 0;
}

export async function benchList(ctx: Context): Promise<void> {
  const history = HISTORY_ROWS.toLocaleString('en-US');
  const listedRows = Math.round((HISTORY_ROWS * LIST_ENDPOINTS) / (LIST_ENDPOINTS + OTHER_ORGS * OTHER_ENDPOINTS_PER_ORG)) + 5 * LIST_ENDPOINTS;
  const name = (p: string) => `  information: GET /api/v1/webhooks ${p} at ${LOAD_FRACTION * 100}% of capacity, 250 deliveries (+ ${history} history) ÷ none`;
  const saturatedName = (p: string) => `  information: the same saturated (${CONNECTIONS} connections, closed loop) (${p})`;
  const twinName = (p: string) => `  information: same answer, org with ${listedRows.toLocaleString('en-US')} rows ÷ org with 250 (${p})`;
  const listed = ctx.tenants.list!;
  let measuredOk = false;
  try {
    const bytesEmpty = await checkListShape(ctx, ctx.tenants.empty!, 0);
    const recentRows = await insertRecent(ctx);
    log(`list_webhooks: inserting ${history} older delivery rows (one insert … select … generate_series), analyze`);
    const inserted = await insertHistory(ctx);
    log(`  inserted in ${inserted.seconds.toFixed(1)} s, analyze ${inserted.analyzeSeconds.toFixed(1)} s`);
    const copied = await copyNewestToTwin(ctx);
    const bytesListed = await checkListShape(ctx, listed, 5);
    const bytesTwin = await checkListShape(ctx, ctx.tenants.twin!, 5);
    log(`list_webhooks: listed (${recentRows} recent + history), empty and twin (${copied} copied rows) organizations, ${PAIRS} rounds, each side ${SEGMENT_SECONDS / 2} s saturated then ${SEGMENT_SECONDS} s at ${LOAD_FRACTION * 100}%`);
    const saturated: Measured[][] = [[], [], []];
    const measured = await withLoads(
      [listLoad(ctx, listed, 2 * WARMUP_SECONDS), listLoad(ctx, ctx.tenants.empty!, WARMUP_SECONDS), listLoad(ctx, ctx.tenants.twin!, WARMUP_SECONDS)],
      ([l, e, t]) =>
        rounds([pacedSide(ctx, l!, 'listed organization', saturated[0]!), pacedSide(ctx, e!, 'empty organization', saturated[1]!), pacedSide(ctx, t!, 'twin organization', saturated[2]!)]),
    );
    const [a, b, c] = measured.summaries;
    requireClean(a!, 'list of the listed organization');
    requireClean(b!, 'list of the empty organization');
    requireClean(c!, 'list of the twin');
    const saturatedRounds = { ...measured, segments: saturated, summaries: saturated.map(summarize) };
    diagnostics.push(
      `list webhooks: server CPU per request at ${LOAD_FRACTION * 100}% load ${fmtMs(b!.cpuMsPerOp)} with no deliveries (answer ${bytesEmpty} bytes), ` +
        `${fmtMs(a!.cpuMsPerOp)} with 250 after ${history} rows of history (answer ${bytesListed} bytes), ${fmtMs(c!.cpuMsPerOp)} for the twin (same answer, ${bytesTwin} bytes)`,
    );
    const latencyFigure = (id: string, figure: string, p: 50 | 99, of: typeof measured, x: number, y: number) =>
      addFigure({
        id,
        figure,
        value: of.summaries[x]!.latency![p === 50 ? 'p50' : 'p99'],
        unit: 'ms',
        baseline: of.summaries[y]!.latency![p === 50 ? 'p50' : 'p99'],
        baselineUnit: 'ms',
        ratios: latencyRatios(of, p, x, y),
        cpu: { value: of.summaries[x]!.cpuMsPerOp, baseline: of.summaries[y]!.cpuMsPerOp },
        loadAverage: of.loadAverage,
        detail: id === 'list_webhooks_p50' ? { listed: a, empty: b, twin: c, inserted, bytes: { empty: bytesEmpty, listed: bytesListed, twin: bytesTwin }, loadFraction: LOAD_FRACTION } : {},
      });
    latencyFigure('list_webhooks_p50', name('p50'), 50, measured, 0, 1);
    latencyFigure('list_webhooks_p99', name('p99'), 99, measured, 0, 1);
    latencyFigure('list_webhooks_saturated_p50', saturatedName('p50'), 50, saturatedRounds, 0, 1);
    latencyFigure('list_webhooks_saturated_p99', saturatedName('p99'), 99, saturatedRounds, 0, 1);
    latencyFigure('list_webhooks_twin_p50', twinName('p50'), 50, measured, 0, 2);
    latencyFigure('list_webhooks_twin_p99', twinName('p99'), 99, measured, 0, 2);
    measuredOk = true;
  } catch (error) {
    failedFigure('list_webhooks_p50', name('p50'), '—', error);
  }
  if (measuredOk) await benchListVsBare(ctx);
  else failedFigure('list_vs_bare', listVsBareName, `≥ ${LIST_GOAL}`, 'the list could not be set up');
  try {
    const t0 = performance.now();
    await ctx.pool.query('vacuum webhook_deliveries');
    log(`  vacuum ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } catch (error) {
    log(`  vacuum failed: ${String(error)}`);
  }
}

const listVsBareName = 'GET /api/v1/webhooks throughput ÷ bare node:http + pg server (250 deliveries)';

/**
 * The listed organization's answer (50 endpoints, 250 deliveries, after the history) from
 * the service and from the bare node:http + pg server running the same two queries,
 * closed loop, in pairs.
 */
async function benchListVsBare(ctx: Context): Promise<void> {
  const listed = ctx.tenants.list!;
  let bare: Child<{ url: string }> | null = null;
  try {
    bare = await startBareRest([listed]);
    const bareAnswer = await expectOk(api(bare.ready.url, 'GET', '/api/v1/webhooks', listed.apiKey), 'bare list');
    const serviceAnswer = await expectOk(api(ctx.server.ready.url, 'GET', '/api/v1/webhooks', listed.apiKey), 'service list');
    const ids = (answer: { endpoints: { id: string; recentDeliveries: { id: string }[] }[] }) =>
      answer.endpoints.flatMap((e) => [e.id, ...e.recentDeliveries.map((d) => d.id)]).join();
    if (ids(bareAnswer) !== ids(serviceAnswer)) throw new Error('the bare server lists other endpoints or deliveries than the service');
    const bytes = { service: JSON.stringify(serviceAnswer).length, bare: JSON.stringify(bareAnswer).length };
    log(`list_webhooks: service vs bare node:http + pg server (answers ${bytes.service} / ${bytes.bare} bytes), ${PAIRS} pairs × ${SEGMENT_SECONDS} s`);
    const barePid = bare.proc.pid;
    const measured = await withLoads(
      [
        listLoad(ctx, listed, WARMUP_SECONDS),
        httpLoad({ url: `${bare.ready.url}/api/v1/webhooks`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, headers: { authorization: `Bearer ${listed.apiKey}` } }),
      ],
      ([service, bareLoad]) =>
        rounds([loadSide('service list', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid), loadSide('bare list', bareLoad!, { seconds: SEGMENT_SECONDS }, barePid)]),
    );
    const [a, b] = measured.summaries;
    requireClean(a!, 'service list');
    requireClean(b!, 'bare list');
    diagnostics.push(
      `list webhooks vs the bare node:http + pg server: ${a!.rps.toFixed(1)} vs ${b!.rps.toFixed(1)} req/s, ` +
        `CPU per request ${fmtMs(a!.cpuMsPerOp)} vs ${fmtMs(b!.cpuMsPerOp)} (answers ${bytes.service} / ${bytes.bare} bytes)`,
    );
    addThroughputFigure({
      id: 'list_vs_bare',
      figure: listVsBareName,
      unit: 'req/s',
      baselineUnit: 'req/s',
      goal: `≥ ${LIST_GOAL}`,
      check: (r) => r >= LIST_GOAL,
      measured,
      detail: { service: a, bare: b, responseBytes: bytes, connections: CONNECTIONS },
    });
  } catch (error) {
    failedFigure('list_vs_bare', listVsBareName, `≥ ${LIST_GOAL}`, error);
  } finally {
    await bare?.stop(5000);
  }
}

