/**
 * Figures 1 and 1b: POST /api/v1/webhooks throughput, 16 connections.
 * Goal: ÷ the bare node:http + pg server doing the same work (parse, seal a secret, the one
 * insert, answer JSON) ≥ 0.6. The raw pg insert loop, which parses and answers nothing, is an
 * information row.
 */
import { startLoad, type Child } from '../lib';
import { CONNECTIONS, DATABASE_URL, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addThroughputFigure, diagnostics, failedFigure, fmtMs, httpLoad, loadSide, log, requireClean, rounds, withLoads } from '../harness';
import { startBareRest, type Context } from '../context';

export const CREATE_GOAL = 0.6;

export async function benchCreateWebhooks(ctx: Context): Promise<void> {
  const name = 'POST /api/v1/webhooks throughput ÷ bare node:http + pg server';
  const rawName = '  information: POST /api/v1/webhooks throughput ÷ raw pg insert loop';
  let bare: Child<{ url: string }> | null = null;
  try {
    const tenant = ctx.tenants.write!;
    const url = 'https://127.0.0.1:8443/bench/create';
    bare = await startBareRest([tenant]);
    log(`create_webhooks: ${CONNECTIONS} connections vs the bare server and vs ${CONNECTIONS} pg clients, ${PAIRS} rounds × ${SEGMENT_SECONDS} s each`);
    const createLoad = (base: string) =>
      httpLoad({
        url: `${base}/api/v1/webhooks`,
        connections: CONNECTIONS,
        warmupSeconds: WARMUP_SECONDS,
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url, eventNames: ['webhook.test'] }),
      });
    const barePid = bare.proc.pid;
    const measured = await withLoads(
      [
        createLoad(ctx.server.ready.url),
        createLoad(bare.ready.url),
        () => startLoad('load-pg.ts', { databaseUrl: DATABASE_URL, organizationId: tenant.organizationId, url, workers: CONNECTIONS, warmupSeconds: WARMUP_SECONDS }),
      ],
      ([service, bareLoad, pg]) =>
        rounds([
          loadSide('service (req)', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid),
          loadSide('bare server (req)', bareLoad!, { seconds: SEGMENT_SECONDS }, barePid),
          loadSide('raw pg (tx)', pg!, { seconds: SEGMENT_SECONDS }),
        ]),
    );
    const [a, b, c] = measured.summaries as [typeof measured.summaries[0], typeof measured.summaries[0], typeof measured.summaries[0]];
    requireClean(a, 'service');
    requireClean(b, 'bare server');
    requireClean(c, 'raw pg');
    diagnostics.push(
      `create webhooks: service ${fmtMs(a.cpuMsPerOp)} CPU per request (${a.cores?.toFixed(2)} cores busy); ` +
        `the bare node:http + pg server ${fmtMs(b.cpuMsPerOp)} per request (${b.cores?.toFixed(2)} cores); ` +
        `the raw pg loop process ${fmtMs(c.cpuMsPerOp)} per transaction (${c.cores?.toFixed(2)} cores)`,
    );
    addThroughputFigure({
      id: 'create_vs_bare',
      figure: name,
      unit: 'req/s',
      baselineUnit: 'req/s',
      goal: `≥ ${CREATE_GOAL}`,
      check: (r) => r >= CREATE_GOAL,
      measured,
      detail: { service: a, bare: b, connections: CONNECTIONS },
    });
    addThroughputFigure({ id: 'create_webhooks', figure: rawName, unit: 'req/s', baselineUnit: 'tx/s', measured, b: 2, detail: { rawPg: c } });
  } catch (error) {
    failedFigure('create_vs_bare', name, `≥ ${CREATE_GOAL}`, error);
  } finally {
    await bare?.stop(5000);
  }
}
