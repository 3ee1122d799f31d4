import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { untilStored } from '../support/deliveries';
import { testTemporalAddress } from '../support/temporal';
import { startWorkerProcess, type WorkerProcess } from '../support/worker-process';

/**
 * The delivery worker as production runs it (`npm run worker`: its own process, the
 * production workflow bundle, its own /metrics) against the run's Temporal server: after a
 * scenario, the worker's counts of attempts, outcomes and dead letters equal what the rows say.
 */
let t: TestApp;
let receiver: HttpsReceiver;
let worker: WorkerProcess | undefined;
let metricsUrl: string;

beforeAll(async () => {
  const tls = await makeTestTls();
  // Per path: "/ok" answers 200, "/flaky" fails twice, "/down" always fails.
  const seen = new Map<string, number>();
  receiver = await startHttpsReceiver({
    tls,
    respond: (_i, req) => {
      const route = req.url ?? '/';
      const n = seen.get(route) ?? 0;
      seen.set(route, n + 1);
      if (route.startsWith('/down')) return { status: 500 };
      if (route.startsWith('/flaky')) return n < 2 ? { status: 503 } : { status: 200 };
      return { status: 200 };
    },
  });
  const taskQueue = `worker-metrics-${randomBytes(6).toString('hex')}`;
  const env = { TEMPORAL_ADDRESS: testTemporalAddress(), TEMPORAL_TASK_QUEUE: taskQueue, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_TEST_RETRY_INTERVAL_MS: '300' };
  t = await startTestApp(env);
  worker = await startWorkerProcess({ ...env, DATABASE_URL: t.databaseUrl });
  metricsUrl = worker.metricsUrl;
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await receiver?.close();
  await t?.close();
});

function counter(metrics: string, name: string, labels = ''): number {
  const line = metrics.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

it("the worker's /metrics count the attempts, outcomes and dead letters the rows hold", async () => {
  const tenant = await t.tenant();
  const ids: string[] = [];
  for (const route of ['ok', 'flaky', 'down']) {
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/${route}`, eventNames: ['webhook.test'] } });
    const sent = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(sent.status).toBe(200);
    ids.push(sent.body.delivery.id as string);
  }
  const [ok, flaky, down] = ids;
  await untilStored(t.orm, ok!, (row) => row.status === 'delivered', 60_000);
  await untilStored(t.orm, flaky!, (row) => row.status === 'delivered', 60_000);
  await untilStored(t.orm, down!, (row) => row.status === 'dead_lettered', 60_000);

  const [rows] = await t.orm.em.fork().execute<{ delivered: number; failed: number; dead: number }[]>(
    `select (select count(*)::int from delivery_attempts where response_status between 200 and 299) as delivered,
            (select count(*)::int from delivery_attempts where dispatched_at is not null and (response_status is null or response_status not between 200 and 299)) as failed,
            (select count(*)::int from dead_letters) as dead`,
  );
  expect(rows).toEqual({ delivered: 2, failed: 2 + 8, dead: 1 });

  // The dead letter is counted when its activity finishes, just after the row changes.
  let metrics = '';
  for (let tries = 0; tries < 100; tries++) {
    metrics = await (await fetch(metricsUrl)).text();
    if (counter(metrics, 'webhook_delivery_events_total', '{event="dead_lettered"}') >= 1) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  expect(counter(metrics, 'webhook_delivery_events_total', '{event="attempt_delivered"}')).toBe(rows!.delivered);
  expect(counter(metrics, 'webhook_delivery_events_total', '{event="attempt_failed"}')).toBe(rows!.failed);
  expect(counter(metrics, 'webhook_delivery_events_total', '{event="dead_lettered"}')).toBe(rows!.dead);
  expect(counter(metrics, 'webhook_dead_letters')).toBe(rows!.dead);
}, 120_000);

it("the worker's /metrics carry Temporal's SDK metrics beside ours: slots, schedule-to-start latency, poll results, sticky cache", async () => {
  const metrics = await (await fetch(metricsUrl)).text();
  expect(metrics).toMatch(/^webhook_delivery_events_total\{/m);
  for (const line of [
    /^temporal_worker_task_slots_available\{[^}]*worker_type="ActivityWorker"[^}]*\} \d+/m,
    /^temporal_worker_task_slots_available\{[^}]*worker_type="WorkflowWorker"[^}]*\} \d+/m,
    /^temporal_activity_schedule_to_start_latency_count\{[^}]*\} [1-9]/m,
    /^temporal_workflow_task_schedule_to_start_latency_count\{[^}]*\} [1-9]/m,
    /^temporal_workflow_task_queue_poll_succeed\w*\{[^}]*\} [1-9]/m,
    /^temporal_num_pollers\{[^}]*poller_type="activity_task"[^}]*\} \d+/m,
    /^temporal_sticky_cache_size\{[^}]*\} \d+/m,
  ]) {
    expect(metrics).toMatch(line);
  }
  // One scrape, one text: every metric family is named once.
  const families = metrics.split('\n').filter((l) => l.startsWith('# TYPE ')).map((l) => l.split(' ')[2]);
  expect(new Set(families).size).toBe(families.length);
});
