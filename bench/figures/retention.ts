/**
 * Figure 9 (information): the retention sweep over the benchmark's history, and what it
 * costs the list and the publish while it runs. The history (figure 2's HISTORY_ROWS
 * delivery rows, spread back over ~3 months, scale plan: payloads kept 30 days) leaves about
 * two thirds of its payloads past their horizon.
 *
 * The sweep runs in the bench process (its work is PostgreSQL's: its own CPU is a statement
 * a batch), with the service's defaults: batches of 1,000 rows, 100 ms after each full batch.
 * - its rate alone: payloads cleared per second, PAIRS segments of SEGMENT_SECONDS;
 * - GET /api/v1/webhooks (the listed organization, 16 connections, closed loop) while it
 *   sweeps ÷ without, in back-to-back pairs: throughput and p99;
 * - PublishEvent deliveries recorded/s (figure 8's load, an organization of its own) while
 *   it sweeps ÷ without, in pairs.
 * Segments "while it sweeps" start the sweep at their start and stop it at their end.
 */
import os from 'node:os';
import pino from 'pino';
import { databaseAt, openDatabase, type MikroORM } from '../../src/db';
import { DeliveryRecords } from '../../src/delivery';
import { RetentionSweep } from '../../src/retention';
import { startLoad } from '../lib';
import { CONNECTIONS, DATABASE_URL, HISTORY_ROWS, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addFigure, addThroughputFigure, diagnostics, failedFigure, httpLoad, latencyRatios, loadSide, log, requireClean, rounds, withLoads, type Side } from '../harness';
import type { Context } from '../context';
import { fanOutLoadSpec } from './fan-out';
import { insertHistory } from './list';

const BATCH_SIZE = 1000;
const PAUSE_MS = 100;

/** The sweep, and the payloads it cleared while it ran. */
class MeasuredSweep {
  readonly sweep: RetentionSweep;
  cleared = 0;
  sweepingSeconds = 0;
  private startedAt = 0;

  constructor(
    private readonly ctx: Context,
    orm: MikroORM,
  ) {
    this.sweep = new RetentionSweep({ orm, records: new DeliveryRecords(), logger: pino({ level: 'silent' }), now: Date.now, intervalMs: 24 * 60 * 60 * 1000, batchSize: BATCH_SIZE, pauseMs: PAUSE_MS });
  }

  async expired(): Promise<number> {
    const { rows } = await this.ctx.pool.query<{ n: string }>(`select count(*) as n from webhook_deliveries where payload_removed = 'expired'`);
    return Number(rows[0]!.n);
  }

  begin(): void {
    this.startedAt = performance.now();
    this.sweep.start();
  }

  async end(): Promise<void> {
    await this.sweep.stop();
    this.sweepingSeconds += (performance.now() - this.startedAt) / 1000;
  }

  /** A side whose segments run while the sweep does. */
  during(side: Side): Side {
    return {
      label: `${side.label} while sweeping`,
      segment: async () => {
        this.begin();
        try {
          return await side.segment();
        } finally {
          await this.end();
        }
      },
    };
  }
}

export async function benchRetention(ctx: Context): Promise<void> {
  const history = HISTORY_ROWS.toLocaleString('en-US');
  const rateName = `information: retention sweep payloads cleared/s over ${history} rows of history (batches of ${BATCH_SIZE}, ${PAUSE_MS} ms pause), alone ÷ under list and publish load`;
  const listName = `information: GET /api/v1/webhooks req/s while the retention sweep runs ÷ without`;
  const listP99Name = `information: GET /api/v1/webhooks p99 (16 connections) while the retention sweep runs ÷ without`;
  const publishName = `information: PublishEvent deliveries recorded/s while the retention sweep runs ÷ without`;
  let orm: MikroORM | null = null;
  try {
    const { rows } = await ctx.pool.query<{ n: string }>('select count(*) as n from webhook_deliveries');
    if (Number(rows[0]!.n) < HISTORY_ROWS) {
      log(`retention: inserting ${history} rows of history`);
      await insertHistory(ctx);
    }
    orm = await openDatabase(databaseAt(DATABASE_URL), { pool: { min: 0, max: 2 } });
    const measuring = new MeasuredSweep(ctx, orm);
    const before = await measuring.expired();

    // Alone: PAIRS segments of SEGMENT_SECONDS.
    const alone: number[] = [];
    for (let i = 0; i < PAIRS; i++) {
      const from = await measuring.expired();
      measuring.begin();
      await new Promise((resolve) => setTimeout(resolve, SEGMENT_SECONDS * 1000));
      const seconds = SEGMENT_SECONDS;
      await measuring.end();
      alone.push(((await measuring.expired()) - from) / seconds);
    }
    log(`retention: alone ${alone.map((r) => r.toFixed(0)).join(', ')} payloads/s`);

    const listed = ctx.tenants.list!;
    const pid = ctx.server.proc.pid;
    const loadedFrom = await measuring.expired();
    const sweptBefore = measuring.sweepingSeconds;
    const list = await withLoads(
      [httpLoad({ url: `${ctx.server.ready.url}/api/v1/webhooks`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, headers: { authorization: `Bearer ${listed.apiKey}` } })],
      ([load]) => {
        const side = loadSide('list', load!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, pid);
        return rounds([measuring.during(side), side]);
      },
    );
    requireClean(list.summaries[0]!, 'list while sweeping');
    requireClean(list.summaries[1]!, 'list');
    const spec = await fanOutLoadSpec(ctx, ctx.tenants.sweep!.organizationId, 'post.held');
    const publish = await withLoads([() => startLoad('load-publish.ts', spec('service'))], ([load]) => {
      const side = loadSide('publish', load!, { seconds: SEGMENT_SECONDS }, pid);
      return rounds([measuring.during(side), side]);
    });
    requireClean(publish.summaries[0]!, 'publish while sweeping');
    requireClean(publish.summaries[1]!, 'publish');
    const underLoad = ((await measuring.expired()) - loadedFrom) / (measuring.sweepingSeconds - sweptBefore);
    const after = await measuring.expired();

    const aloneMedian = [...alone].sort((x, y) => x - y)[Math.floor(alone.length / 2)]!;
    addFigure({ id: 'retention_sweep_rate', figure: `  ${rateName}`, value: aloneMedian, unit: 'payloads/s', baseline: underLoad, baselineUnit: 'payloads/s', ratios: alone.map((r) => r / underLoad) });
    addThroughputFigure({ id: 'retention_list', figure: `  ${listName}`, unit: 'req/s', baselineUnit: 'req/s', measured: list, detail: { sweeping: list.summaries[0], without: list.summaries[1] } });
    addFigure({
      id: 'retention_list_p99',
      figure: `  ${listP99Name}`,
      value: list.summaries[0]!.latency!.p99,
      unit: 'ms',
      baseline: list.summaries[1]!.latency!.p99,
      baselineUnit: 'ms',
      ratios: latencyRatios(list, 99, 0, 1),
      loadAverage: list.loadAverage,
    });
    addThroughputFigure({ id: 'retention_publish', figure: `  ${publishName}`, unit: 'deliveries/s', baselineUnit: 'deliveries/s', scale: 100, measured: publish, detail: { sweeping: publish.summaries[0], without: publish.summaries[1] } });
    const { rows: table } = await ctx.pool.query<{ n_dead_tup: string; n_live_tup: string; autovacuum_count: string; last_autovacuum: Date | null }>(
      `select n_dead_tup, n_live_tup, autovacuum_count, last_autovacuum from pg_stat_user_tables where relname = 'webhook_deliveries'`,
    );
    diagnostics.push(
      `retention sweep: ${after - before} payloads cleared in ${measuring.sweepingSeconds.toFixed(1)} s of sweeping (alone ${alone.map((r) => r.toFixed(0)).join('/')} per s; under load ${underLoad.toFixed(0)} per s); ` +
        `webhook_deliveries afterwards ${table[0]?.n_live_tup} live and ${table[0]?.n_dead_tup} dead row versions, autovacuum ran ${table[0]?.autovacuum_count} times (last ${table[0]?.last_autovacuum?.toISOString() ?? 'never'}); load average ${os.loadavg()[0]!.toFixed(1)}`,
    );
  } catch (error) {
    failedFigure('retention_sweep_rate', rateName, '—', error);
  } finally {
    await orm?.close();
  }
}
