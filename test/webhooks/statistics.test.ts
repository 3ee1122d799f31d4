import { randomUUID } from 'node:crypto';
import { endpointStatistics, rollUpStatistics, type EndpointStatistics } from '../../src/delivery';
import { startTestApp, type TestApp } from '../support/app';
import { endpoint, organization, untilStored } from '../support/deliveries';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  // The roll-up pass runs when a test says (rollUpAll), not on its own: the suite reads before and after it.
  const hour = String(60 * 60_000);
  t = await startTestApp(
    { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20', DELIVERY_TEST_RETRY_INTERVAL_MS: '50', STATISTICS_ROLLUP_INTERVAL_MS: hour, RETENTION_SWEEP_INTERVAL_MS: hour },
    { listen: false },
  );
  receiver = await startHttpsReceiver({ tls, respond: (index) => (index === 0 ? { status: 503, body: 'busy' } : { status: 200 }) });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

it("counts an endpoint's deliveries of the period by status, with attempts, response times and the last failure", async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/stats` } });
  const id = created.body.endpoint.id as string;
  const deliveries: string[] = [];
  for (let i = 0; i < 3; i++) {
    const sent = await t.rest('POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey, body: {} });
    deliveries.push(sent.body.delivery.id as string);
  }
  for (const deliveryId of deliveries) await untilStored(t.orm, deliveryId, (row) => row.status === 'delivered');
  // One more, recorded two days ago: outside 24 h, inside 7 days.
  await t.orm.em.fork().execute("update webhook_deliveries set created_at = now() - interval '2 days' where id = ?", [deliveries[2]]);

  const [failed] = await t.orm.em.fork().execute<{ delivery_id: string }[]>('select delivery_id from delivery_attempts where response_status = 503');

  // Read from the delivery rows first, then from the hourly roll-ups: the same answers.
  for (const rolled of [false, true]) {
    if (rolled) expect(await rollUpAll()).toBeGreaterThanOrEqual(3);
    const day = await t.rest('GET', `/api/v1/webhooks/${id}/statistics`, { apiKey: tenant.apiKey });
    expect(day.status).toBe(200);
    expect(day.body).toMatchObject({ period: '24h', total: 2, successRate: 1, byStatus: [{ status: 'delivered', count: 2 }] });
    const week = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=7d`, { apiKey: tenant.apiKey });
    expect(week.body).toMatchObject({ period: '7d', total: 3, attempts: 4, successRate: 1 });
    expect(Number(week.body.responseTimeP50Ms)).toBeGreaterThanOrEqual(1);
    expect(Number(week.body.responseTimeP95Ms)).toBeGreaterThanOrEqual(Number(week.body.responseTimeP50Ms));
    expect(week.body.lastFailure).toMatchObject({ deliveryId: failed!.delivery_id, responseStatus: 503 });
    expect(week.body.lastFailure.error).toContain('503');
  }
});

it('answers an endpoint with no deliveries with zeros, and refuses an unknown period', async () => {
  const tenant = await t.tenant();
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/quiet` } });
  const id = created.body.endpoint.id as string;
  const empty = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=30d`, { apiKey: tenant.apiKey });
  expect(empty.status).toBe(200);
  expect(empty.body.total ?? 0).toBe(0);
  expect(empty.body.lastFailure).toBeUndefined();
  const refused = await t.rest('GET', `/api/v1/webhooks/${id}/statistics?period=1y`, { apiKey: tenant.apiKey });
  expect([refused.status, refused.body.code]).toEqual([400, 'STATISTICS_PERIOD_INVALID']);
});

/** The roll-up pass, batch after batch until none is left: what the background pass does. */
async function rollUpAll(batch = 1000): Promise<number> {
  let rolled = 0;
  for (;;) {
    const n = await rollUpStatistics(t.orm.em.fork(), batch);
    rolled += n;
    if (n < batch) return rolled;
  }
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The statistics computed from the rows themselves, as the statement did before the roll-ups (nearest-rank percentiles). */
async function fromRows(endpointId: string, since: Date): Promise<Omit<EndpointStatistics, 'p50Ms' | 'p95Ms'> & { p50: number | null; p95: number | null }> {
  const [row] = await t.orm.em.fork().execute<
    { by_status: Record<string, number> | null; attempts: number; p50: number | null; p95: number | null; last_failure: { delivery_id: string; at_ms: number; response_status: number | null; error: string | null } | null }[]
  >(
    `with period as (select id, status from webhook_deliveries where endpoint_id = ? and created_at >= ?),
     tried as (select a.delivery_id, a.finished_at, a.response_status, a.error, extract(epoch from a.finished_at - a.dispatched_at) * 1000 as ms
                 from period d join delivery_attempts a on a.delivery_id = d.id where a.dispatched_at is not null)
     select (select json_object_agg(status, n) from (select status, count(*)::int as n from period group by status) s) as by_status,
            (select count(*)::int from tried) as attempts,
            (select percentile_disc(0.5) within group (order by ms) from tried where response_status is not null and finished_at is not null)::float8 as p50,
            (select percentile_disc(0.95) within group (order by ms) from tried where response_status is not null and finished_at is not null)::float8 as p95,
            (select json_build_object('delivery_id', delivery_id, 'at_ms', floor(extract(epoch from finished_at) * 1000)::float8, 'response_status', response_status, 'error', error)
               from tried where finished_at is not null and (response_status is null or response_status not between 200 and 299)
              order by finished_at desc limit 1) as last_failure`,
    [endpointId, since],
  );
  const r = row!;
  return {
    byStatus: r.by_status ?? {},
    attempts: r.attempts,
    p50: r.p50,
    p95: r.p95,
    lastFailure: r.last_failure
      ? { deliveryId: r.last_failure.delivery_id, atMs: Number(r.last_failure.at_ms), responseStatus: r.last_failure.response_status, error: r.last_failure.error }
      : null,
  };
}

/** The statistics' answer equals the rows' own, the percentiles within their bucket (9.1 %, and 1 ms of rounding). */
async function expectAsTheRowsSay(organizationId: string, endpointId: string, since: Date): Promise<EndpointStatistics> {
  const answer = await endpointStatistics(t.orm.em.fork(), { organizationId, endpointId, since });
  const rows = await fromRows(endpointId, since);
  expect({ byStatus: answer.byStatus, attempts: answer.attempts, lastFailure: answer.lastFailure }).toEqual({
    byStatus: rows.byStatus,
    attempts: rows.attempts,
    lastFailure: rows.lastFailure,
  });
  for (const [estimate, exact] of [
    [answer.p50Ms, rows.p50],
    [answer.p95Ms, rows.p95],
  ] as const) {
    if (exact === null) expect(estimate).toBeNull();
    else expect(Math.abs(estimate! - exact)).toBeLessThanOrEqual(0.0906 * exact + 1);
  }
  return answer;
}

/** A delivery and its attempts as the engines leave them, written straight to the rows. */
interface HistoryAttempt {
  series: number;
  attempt: number;
  startedAt: number;
  dispatched: boolean;
  /** Null: still under way. */
  ms: number | null;
  responseStatus: number | null;
  error: string | null;
}

async function writeHistory(organizationId: string, endpointId: string, d: { id: string; status: string; series: number; createdAt: number; attempts: HistoryAttempt[] }): Promise<void> {
  const em = t.orm.em.fork();
  const eventId = `evt_${d.id}`;
  await em.execute(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, series, attempt_count, workflow_id, created_at, updated_at)
     values (?, ?, ?, ?, 'webhook.test', '{}', ?, ?, ?, ?, ?, ?)
     on conflict (id) do update set status = excluded.status, series = excluded.series, attempt_count = excluded.attempt_count, updated_at = excluded.updated_at`,
    [d.id, organizationId, endpointId, eventId, d.status, d.series, d.attempts.filter((a) => a.series === d.series).length, `webhook-delivery/${eventId}`, new Date(d.createdAt), new Date()],
  );
  for (const a of d.attempts) {
    const dispatchedAt = a.dispatched ? new Date(a.startedAt + 5) : null;
    const finishedAt = a.ms === null ? null : new Date(a.startedAt + 5 + a.ms);
    await em.execute(
      `insert into delivery_attempts (delivery_id, series, attempt, started_at, dispatched_at, finished_at, response_status, error)
       values (?, ?, ?, ?, ?, ?, ?, ?)
       on conflict (delivery_id, series, attempt) do update set dispatched_at = excluded.dispatched_at, finished_at = excluded.finished_at,
         response_status = excluded.response_status, error = excluded.error`,
      [d.id, a.series, a.attempt, new Date(a.startedAt), dispatchedAt, finishedAt, a.responseStatus, a.error],
    );
  }
}

/** A small deterministic generator, so that a failure can be replayed. */
function randomFrom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

const OPEN = ['pending', 'retrying', 'held'];
const FINAL = ['delivered', 'dead_lettered', 'failed'];

it('answers from hourly roll-ups what the delivery rows say, for random histories, however far the roll-up pass got', async () => {
  const organizationId = await organization(t.orm, 'Statistics history');
  const { id: endpointId } = await endpoint(t.orm, organizationId);
  const random = randomFrom(20261128);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const now = Date.now();
  const attemptsOf = (series: number, from: number, open: boolean): HistoryAttempt[] => {
    const n = open ? Math.floor(random() * 3) : 1 + Math.floor(random() * 4);
    return Array.from({ length: n }, (_, i) => {
      const last = i === n - 1;
      const dispatched = !(open && last && random() < 0.3);
      const responseStatus = pick([200, 500, 503, 410, null]);
      return {
        series,
        attempt: i + 1,
        startedAt: from + i * 30_000,
        dispatched,
        ms: open && last ? null : Math.round(2 ** (random() * 14) * 10) / 10,
        responseStatus,
        error: responseStatus !== null && responseStatus < 300 ? null : `The endpoint answered ${responseStatus ?? 'nothing'}.`,
      };
    });
  };
  const history = Array.from({ length: 400 }, () => {
    const status = random() < 0.2 ? pick(OPEN) : pick(FINAL);
    const createdAt = now - Math.floor(random() * 40 * DAY);
    return { id: randomUUID(), status, series: 1, createdAt, attempts: attemptsOf(1, createdAt + 100, OPEN.includes(status)) };
  });
  for (const d of history) await writeHistory(organizationId, endpointId, d);

  const periods = [DAY, 7 * DAY, 30 * DAY, 45 * DAY].map((length) => new Date(Math.floor((now - length) / HOUR) * HOUR));
  const expectAll = async () => {
    for (const since of periods) await expectAsTheRowsSay(organizationId, endpointId, since);
  };
  await expectAll();
  expect(await rollUpStatistics(t.orm.em.fork(), 50)).toBe(50);
  await expectAll();
  await rollUpAll(37);
  await expectAll();

  // Open deliveries finish; finished ones are resent (a new series, some already finished again).
  for (const d of history) {
    if (OPEN.includes(d.status)) {
      d.status = pick(FINAL);
      d.attempts = d.attempts.map((a) => ({ ...a, dispatched: true, ms: a.ms ?? 42 }));
    } else if (random() < 0.25) {
      d.series = 2;
      d.status = pick([...OPEN, ...FINAL]);
      d.attempts = [...d.attempts, ...attemptsOf(2, now - Math.floor(random() * HOUR), OPEN.includes(d.status))];
    } else continue;
    await writeHistory(organizationId, endpointId, d);
  }
  await expectAll();
  await rollUpStatistics(t.orm.em.fork(), 20);
  await expectAll();
  await rollUpAll();
  await expectAll();
  const month = await expectAsTheRowsSay(organizationId, endpointId, periods[2]!);
  expect(Object.values(month.byStatus).reduce((sum, n) => sum + n, 0)).toBeGreaterThan(200);
  expect(month.p95Ms).not.toBeNull();
}, 60_000);

it('counts a delivery in the hour it was recorded in when its outcome comes right after the hour ends, before and after the roll-up', async () => {
  const organizationId = await organization(t.orm, 'Statistics boundary');
  const { id: endpointId } = await endpoint(t.orm, organizationId);
  const hour = Math.floor(Date.now() / HOUR) * HOUR - HOUR;
  const before = { id: randomUUID(), status: 'retrying', series: 1, createdAt: hour - 1, attempts: [] as HistoryAttempt[] };
  const at = { id: randomUUID(), status: 'delivered', series: 1, createdAt: hour, attempts: [] as HistoryAttempt[] };
  const attempt = (startedAt: number, ms: number | null, responseStatus: number | null): HistoryAttempt => ({
    series: 1,
    attempt: 1,
    startedAt,
    dispatched: true,
    ms,
    responseStatus,
    error: responseStatus === 200 ? null : 'The endpoint answered 500.',
  });
  before.attempts = [attempt(hour - 1, null, null)];
  at.attempts = [attempt(hour, 120, 200)];
  for (const d of [before, at]) await writeHistory(organizationId, endpointId, d);

  const answers = async () => ({
    fromTheHour: (await expectAsTheRowsSay(organizationId, endpointId, new Date(hour))).byStatus,
    fromTheHourBefore: (await expectAsTheRowsSay(organizationId, endpointId, new Date(hour - HOUR))).byStatus,
  });
  expect(await answers()).toEqual({ fromTheHour: { delivered: 1 }, fromTheHourBefore: { delivered: 1, retrying: 1 } });
  await rollUpAll();
  // The outcome of the delivery recorded a millisecond before the hour comes a millisecond after it.
  before.status = 'dead_lettered';
  before.attempts = [{ ...attempt(hour - 1, 0, 500) }];
  await writeHistory(organizationId, endpointId, before);
  expect(await answers()).toEqual({ fromTheHour: { delivered: 1 }, fromTheHourBefore: { delivered: 1, dead_lettered: 1 } });
  await rollUpAll();
  expect(await answers()).toEqual({ fromTheHour: { delivered: 1 }, fromTheHourBefore: { delivered: 1, dead_lettered: 1 } });
  const rolled = await t.orm.em.fork().execute<{ hour: string; delivered: number; dead_lettered: number }[]>(
    'select hour, delivered, dead_lettered from endpoint_statistics_hours where endpoint_id = ? order by hour',
    [endpointId],
  );
  expect(rolled.map((r) => [new Date(r.hour).getTime(), r.delivered, r.dead_lettered])).toEqual([
    [hour - HOUR, 0, 1],
    [hour, 1, 0],
  ]);
});
