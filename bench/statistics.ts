/**
 * The endpoint statistics' answer time on the benchmark's history (bench/README.md,
 * "Endpoint statistics"): `npm run bench:statistics`. A database of its own holds 1,000,000
 * deliveries spread round-robin over 50 endpoints and back in time over ~3 months, as figure
 * 2's history is (terminal statuses; 1–3 attempts each, 8 for a dead-lettered one), with
 * their attempt rows (about 2.1 million). The rows are written after the migrations, as a
 * history that predates the hourly roll-ups: the roll-up pass then catches up on them as it
 * would in production (StatisticsRollup.catchUp, its batches and pauses), and its time is
 * printed. Then GetWebhookStatistics's work (the endpoint's lookup and the one statement)
 * runs back to back for one endpoint and each period, and the p50 and p95 of the calls are
 * printed. Goal: p95 ≤ 50 ms for every period.
 */
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { databaseAt, ensureServiceRoles, migrate, openDatabase } from '../src/db';
import { createOrganization } from '../src/auth';
import { insertEndpoint } from '../src/endpoints';
import { statisticsAnswer, STATISTICS_PERIODS } from '../src/webhooks/insight';
import { StatisticsRollup } from '../src/delivery';
import { createLogger } from '../src/config/logger';
import { ADMIN_URL, HISTORY_ROWS, log } from './harness';
import { DELIVERY_COLUMNS } from './context';

const NAME = 'publishing_bench_statistics';
const ENDPOINTS = 50;
const CALLS = Math.round(Number(process.env.BENCH_STATISTICS_CALLS ?? 200));
const GOAL_P95_MS = 50;

async function admin<T>(work: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

async function main(): Promise<number> {
  await admin(async (c) => {
    await c.query(`drop database if exists ${NAME} with (force)`);
    await c.query(`create database ${NAME}`);
    await ensureServiceRoles(c, { login: true });
  });
  const url = new URL(ADMIN_URL);
  url.pathname = `/${NAME}`;
  const orm = await openDatabase(databaseAt(url.toString()), { pool: { min: 0, max: 2 } });
  try {
    await migrate(orm);
    const em = orm.em.fork();
    const organization = await createOrganization(em, { name: 'Statistics bench', plan: 'scale' });
    const endpointIds: string[] = [];
    for (let i = 0; i < ENDPOINTS; i++) {
      const id = randomUUID();
      endpointIds.push(id);
      await insertEndpoint(em, {
        id,
        organizationId: organization.id,
        url: `https://127.0.0.1:9/hook/${i}`,
        description: '',
        eventNames: ['webhook.test'],
        secretKeyId: 'dev',
        secretCiphertext: Buffer.alloc(60),
        signatureScheme: 'legacy',
        createdAt: new Date(),
      });
    }
    log(`statistics: inserting ${HISTORY_ROWS.toLocaleString('en-US')} deliveries over ${ENDPOINTS} endpoints and their attempts`);
    const started = performance.now();
    const pg = new Client({ connectionString: url.toString() });
    await pg.connect();
    await pg.query(
      `insert into webhook_deliveries ${DELIVERY_COLUMNS}
       select gen_random_uuid(), $1::uuid, e.id, e.evt, 'webhook.test', '{}', e.status, e.attempts, null,
              case when e.status = 'delivered' then null else 'The endpoint answered HTTP 500.' end,
              case when e.status = 'delivered' then 200 else 500 end,
              'webhook-delivery/' || e.evt, null,
              case when e.status = 'delivered' then e.at + interval '200 milliseconds' else null end,
              e.at, e.at + interval '1 second'
         from (select ($2::uuid[])[1 + g % ${ENDPOINTS}] as id, 'evt_hist' || lpad(g::text, 8, '0') as evt,
                      case when g % 50 = 0 then 'dead_lettered' when g % 20 = 0 then 'failed' else 'delivered' end as status,
                      case when g % 50 = 0 then 8 else 1 + (g % 3) end as attempts,
                      now() - interval '1 hour' - g * interval '8 seconds' as at
                 from generate_series(1, $3::int) g) e`,
      [organization.id, endpointIds, HISTORY_ROWS],
    );
    // Every attempt but the last failed with a 500; the last answered as the delivery's status says.
    await pg.query(
      `insert into delivery_attempts (delivery_id, series, attempt, started_at, dispatched_at, finished_at, response_status, error, error_class)
       select d.id, 1, n, d.created_at + (n - 1) * interval '30 seconds', d.created_at + (n - 1) * interval '30 seconds',
              d.created_at + (n - 1) * interval '30 seconds' + (20 + (hashtext(d.event_id) & 255)) * interval '1 millisecond',
              case when n = d.attempt_count then d.last_response_status else 500 end,
              case when n = d.attempt_count and d.status = 'delivered' then null else 'The endpoint answered HTTP 500.' end,
              case when n = d.attempt_count and d.status = 'delivered' then null else 'http_status' end
         from webhook_deliveries d cross join lateral generate_series(1, d.attempt_count) n`,
    );
    await pg.query('analyze webhook_deliveries');
    await pg.query('analyze delivery_attempts');
    await pg.end();
    const [{ attempts } = { attempts: 0 }] = await em.execute<{ attempts: number }[]>('select count(*)::int as attempts from delivery_attempts');
    log(`  inserted in ${((performance.now() - started) / 1000).toFixed(1)} s (${attempts.toLocaleString('en-US')} attempts)`);

    const caughtUp = performance.now();
    const rolled = await new StatisticsRollup({ orm, logger: createLogger('warn'), intervalMs: 60_000 }).catchUp();
    const [{ hours } = { hours: 0 }] = await em.execute<{ hours: number }[]>('select count(*)::int as hours from endpoint_statistics_hours');
    log(`statistics roll-up: caught up on ${rolled.toLocaleString('en-US')} deliveries in ${((performance.now() - caughtUp) / 1000).toFixed(1)} s (${hours.toLocaleString('en-US')} endpoint-hours)`);
    // As autovacuum's analyze would after the pass changed every row: the planner sees that few are left to roll up.
    await em.execute('analyze endpoint_statistics_hours');
    await em.execute('analyze webhook_deliveries');

    const endpointId = endpointIds[0]!;
    let failed = false;
    for (const period of Object.keys(STATISTICS_PERIODS)) {
      const times: number[] = [];
      let total = 0;
      for (let i = 0; i < CALLS + 10; i++) {
        const t0 = performance.now();
        const answer = await statisticsAnswer(orm.em.fork(), organization.id, endpointId, period, Date.now());
        if (i >= 10) times.push(performance.now() - t0);
        total = answer.total;
      }
      times.sort((a, b) => a - b);
      const p95 = percentile(times, 95);
      const verdict = p95 <= GOAL_P95_MS ? 'meets' : 'misses';
      if (p95 > GOAL_P95_MS) failed = true;
      log(`statistics ${period}: ${total.toLocaleString('en-US')} deliveries of the endpoint; p50 ${percentile(times, 50).toFixed(1)} ms, p95 ${p95.toFixed(1)} ms over ${CALLS} calls (${verdict} p95 ≤ ${GOAL_P95_MS} ms)`);
    }
    const plan = await em.execute<{ 'QUERY PLAN': string }[]>(
      `explain select count(*) from webhook_deliveries where endpoint_id = ? and created_at >= now() - interval '30 days' and statistics_series is distinct from series`,
      [endpointId],
    );
    log(`plan of the read of what is not rolled up:\n${plan.map((line) => `  ${line['QUERY PLAN']}`).join('\n')}`);
    return failed ? 1 : 0;
  } finally {
    await orm.close();
    await admin((c) => c.query(`drop database if exists ${NAME} with (force)`));
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 2;
  },
);
