import { randomUUID } from 'node:crypto';
import { Code } from '@connectrpc/connect';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { main } from '../../src/operator/cli';
import { createLogger } from '../../src/config';
import { RetentionSweep } from '../../src/retention';
import { RETENTION_BY_PLAN } from '../../src/endpoints';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, failureOf } from '../support/clients';
import { endpoint, recordDelivery } from '../support/deliveries';

/**
 * Retention and erasure of delivery data, on PostgreSQL (the embedded PGlite database:
 * embedded-sweep.test.ts). Deliveries are recorded through the records and then given their
 * age and outcome with SQL: what is under test is what the sweep and the erasure do to rows of
 * that age, read back with SQL and through the API and the operator CLI. The engine polls once
 * a minute and every tenant's kill switch is on, so nothing is sent meanwhile.
 */
let t: TestApp;
const DAY = 24 * 60 * 60 * 1000;

beforeAll(async () => {
  // Batches of 2: a pass over these rows takes several statements, as a long backlog does.
  t = await startTestApp({ DELIVERY_POLL_INTERVAL_MS: '60000' });
});

/** A sweep over the app's database and records; batches of 2, so a pass over a few rows takes several statements, as a long backlog does. */
function sweeper(intervalMs = 60_000): RetentionSweep {
  return new RetentionSweep({ orm: t.orm, records: t.app.delivery.records, logger: createLogger('silent'), now: Date.now, intervalMs, batchSize: 2, pauseMs: 0 });
}
afterAll(async () => t?.close());

async function rows<T = any>(sql: string, params: unknown[] = []): Promise<T[]> {
  return t.orm.em.fork().execute<T[]>(sql, params);
}

async function tenantOn(plan: 'scale' | 'enterprise'): Promise<Tenant> {
  const tenant = await t.tenant({ plan });
  await t.app.delivery.records.writeKillSwitch(t.orm.em.fork(), tenant.organizationId, true, 'retention test: nothing leaves');
  return tenant;
}

/** A delivery recorded `ageDays` ago, ended in `status`, with one attempt per entry of `attempts` (its age and the receiver's answer excerpt). */
async function delivery(
  organizationId: string,
  endpointId: string,
  options: { ageDays: number; status?: string; attempts?: { ageDays: number; excerpt: string }[]; eventId?: string },
): Promise<string> {
  const { deliveryId } = await recordDelivery(t.orm, t.app.delivery.records, organizationId, endpointId, options.eventId);
  const at = new Date(Date.now() - options.ageDays * DAY);
  const attempts = options.attempts ?? [];
  await rows(
    `update webhook_deliveries set status = ?, attempt_count = ?, created_at = ?, updated_at = ?,
       next_attempt_at = case when ? = 'retrying' then now() + interval '1 day' end, last_response_status = 500 where id = ?`,
    [options.status ?? 'delivered', attempts.length, at, at, options.status ?? 'delivered', deliveryId],
  );
  for (const [i, attempt] of attempts.entries()) {
    const started = new Date(Date.now() - attempt.ageDays * DAY);
    await rows(
      `insert into delivery_attempts (delivery_id, series, attempt, started_at, dispatched_at, finished_at, response_status, error, error_class, response_excerpt)
       values (?, 1, ?, ?, ?, ?, 500, 'HTTP 500', 'http_status', ?)`,
      [deliveryId, i + 1, started, started, started, attempt.excerpt],
    );
  }
  return deliveryId;
}

/** A published event of the organization, recorded `ageDays` ago, with a payload that names someone. */
async function event(organizationId: string, eventId: string, ageDays = 0): Promise<void> {
  const at = new Date(Date.now() - ageDays * DAY);
  await rows(
    `insert into events (id, organization_id, event_id, event_type, payload, occurred_at, publisher, created_at) values (?, ?, ?, 'customer.updated', '{"name":"Ada Lovelace"}', ?, 'test', ?)`,
    [randomUUID(), organizationId, eventId, at, at],
  );
}

async function storedEvent(organizationId: string, eventId: string) {
  const [row] = await rows(`select payload, payload_removed from events where organization_id = ? and event_id = ?`, [organizationId, eventId]);
  return row;
}

async function stored(deliveryId: string) {
  const [row] = await rows(`select payload, payload_removed, status, attempt_count from webhook_deliveries where id = ?`, [deliveryId]);
  const attempts = await rows(`select attempt, response_excerpt from delivery_attempts where delivery_id = ? order by attempt`, [deliveryId]);
  return { ...row, attempts };
}

async function operator(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const status = await main(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken },
  });
  return { status, stdout, stderr };
}

describe('the retention sweep', () => {
  it("removes each plan's expired data in batches, keeps what the plan still keeps and whatever is still being sent, and the API states it", async () => {
    const scale = await tenantOn('scale');
    const enterprise = await tenantOn('enterprise');
    const scaleEndpoint = await endpoint(t.orm, scale.organizationId);
    const enterpriseEndpoint = await endpoint(t.orm, enterprise.organizationId);
    const days = RETENTION_BY_PLAN.scale.payloadDays;
    const attemptDays = RETENTION_BY_PLAN.scale.attemptDays;

    const expired = await delivery(scale.organizationId, scaleEndpoint.id, { ageDays: days + 1, attempts: [{ ageDays: attemptDays + 1, excerpt: 'old answer' }, { ageDays: attemptDays - 1, excerpt: 'newer answer' }] });
    const alsoExpired = await delivery(scale.organizationId, scaleEndpoint.id, { ageDays: days + 2, status: 'dead_lettered' });
    const thirdExpired = await delivery(scale.organizationId, scaleEndpoint.id, { ageDays: days + 3, status: 'failed' });
    const kept = await delivery(scale.organizationId, scaleEndpoint.id, { ageDays: days - 1 });
    const open = await delivery(scale.organizationId, scaleEndpoint.id, { ageDays: days + 5, status: 'retrying', attempts: [{ ageDays: attemptDays + 5, excerpt: 'still retrying' }] });
    const longerPlan = await delivery(enterprise.organizationId, enterpriseEndpoint.id, { ageDays: days + 1, attempts: [{ ageDays: attemptDays + 1, excerpt: 'enterprise answer' }] });
    const jobAt = (ageDays: number) => new Date(Date.now() - ageDays * DAY);
    const job = (state: string, finishedDaysAgo: number | null) =>
      rows(
        `insert into recovery_jobs (id, organization_id, endpoint_id, since, until, requested_until, state, found, resent, next_batch_at, requested_by, created_at, started_at, finished_at, updated_at)
         values (?, ?, ?, ?, ?, null, ?, 0, 0, now(), 'operator', ?, ?, ?, now()) returning id`,
        [randomUUID(), scale.organizationId, scaleEndpoint.id, jobAt(400 + Math.random()), jobAt(399), state, jobAt(400), jobAt(400), finishedDaysAgo === null ? null : jobAt(finishedDaysAgo)],
      ).then((r) => r[0].id as string);
    const oldEvent = `evt_${randomUUID()}`;
    const newEvent = `evt_${randomUUID()}`;
    await event(scale.organizationId, oldEvent, days + 1);
    await event(scale.organizationId, newEvent, days - 1);
    const oldJob = await job('finished', RETENTION_BY_PLAN.scale.recoveryJobDays + 1);
    const recentJob = await job('stopped', RETENTION_BY_PLAN.scale.recoveryJobDays - 1);

    const pass = await sweeper().sweep();
    expect(pass.payloadsExpired).toBeGreaterThanOrEqual(3);
    expect(pass.batches).toBeGreaterThan(3);

    for (const id of [expired, alsoExpired, thirdExpired]) expect(await stored(id)).toMatchObject({ payload: '', payload_removed: 'expired' });
    expect(await stored(expired)).toMatchObject({ status: 'delivered', attempt_count: 2, attempts: [{ attempt: 2, response_excerpt: 'newer answer' }] });
    expect(await stored(kept)).toMatchObject({ payload_removed: null, payload: expect.stringContaining('webhook.test') });
    expect(await stored(open)).toMatchObject({ payload_removed: null, status: 'retrying', attempts: [{ response_excerpt: 'still retrying' }] });
    expect(await stored(longerPlan)).toMatchObject({ payload_removed: null, attempts: [{ response_excerpt: 'enterprise answer' }] });
    expect((await rows(`select id from recovery_jobs where id in (?, ?)`, [oldJob, recentJob])).map((r) => r.id)).toEqual([recentJob]);
    expect(await storedEvent(scale.organizationId, oldEvent)).toEqual({ payload: {}, payload_removed: 'expired' });
    expect(await storedEvent(scale.organizationId, newEvent)).toEqual({ payload: { name: 'Ada Lovelace' }, payload_removed: null });

    // What the customer sees: a stated field, never an error.
    const shown = await t.rest('GET', `/api/v1/webhooks/${scaleEndpoint.id}/deliveries/${expired}`, { apiKey: scale.apiKey });
    expect(shown.status).toBe(200);
    expect(shown.body.payload ?? '').toBe('');
    expect(shown.body.delivery).toMatchObject({ status: 'delivered', attemptCount: 2, payloadState: 'expired', payloadRemovedAt: expect.any(String) });
    const log = await t.rest('GET', `/api/v1/webhooks/${scaleEndpoint.id}/deliveries`, { apiKey: scale.apiKey });
    const states = Object.fromEntries(log.body.deliveries.map((d: any) => [d.id, d.payloadState]));
    expect(states).toMatchObject({ [expired]: 'expired', [kept]: 'available', [open]: 'available' });

    // Nothing is left to send again: refused with a code on REST and gRPC alike.
    const resend = await t.rest('POST', `/api/v1/webhooks/${scaleEndpoint.id}/deliveries/${alsoExpired}/resend`, { apiKey: scale.apiKey, body: {} });
    expect([resend.status, resend.body.code]).toEqual([410, 'DELIVERY_PAYLOAD_EXPIRED']);
    const grpc = client(WebhookService, t.url, 'grpc', scale.apiKey);
    expect(await failureOf(grpc.resendWebhookDelivery({ id: scaleEndpoint.id, deliveryId: thirdExpired }))).toEqual({ code: Code.FailedPrecondition, reason: 'DELIVERY_PAYLOAD_EXPIRED' });
    const since = new Date(Date.now() - (days + 2) * DAY).toISOString();
    const until = new Date(Date.now() - (days - 1) * DAY).toISOString();
    const recover = await t.rest('POST', `/api/v1/webhooks/${scaleEndpoint.id}/recover`, { apiKey: scale.apiKey, body: { since, until, dryRun: true } });
    expect([recover.status, recover.body.code]).toEqual([410, 'DELIVERY_PAYLOAD_EXPIRED']);
    expect(await stored(alsoExpired)).toMatchObject({ status: 'dead_lettered' });

    // A second pass finds nothing more of these.
    await sweeper().sweep();
    expect(await stored(kept)).toMatchObject({ payload_removed: null });
  });

  it('runs in the background from start until stop, on the shared poller', async () => {
    const tenant = await tenantOn('scale');
    const { id } = await endpoint(t.orm, tenant.organizationId);
    const old = await delivery(tenant.organizationId, id, { ageDays: RETENTION_BY_PLAN.scale.payloadDays + 1 });
    const sweep = sweeper(20);
    sweep.start();
    try {
      for (let i = 0; (await stored(old)).payload_removed === null; i++) {
        if (i > 250) throw new Error('the background sweep did not expire the payload within 5 s');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      await sweep.stop();
    }
  });
});

describe('erasure', () => {
  it("erases an organization's payloads and response excerpts by event, endpoint or all, after a dry run, keeping statuses and counts, audited and idempotent", async () => {
    const tenant = await tenantOn('scale');
    const bystander = await tenantOn('scale');
    const first = await endpoint(t.orm, tenant.organizationId);
    const second = await endpoint(t.orm, tenant.organizationId);
    const elsewhere = await endpoint(t.orm, bystander.organizationId);
    const answer = (excerpt: string) => [{ ageDays: 1, excerpt }];
    const shared = `evt_${randomUUID()}`;
    const a = await delivery(tenant.organizationId, first.id, { ageDays: 3, attempts: answer('{"name":"Ada Lovelace"}'), eventId: shared });
    const b = await delivery(tenant.organizationId, first.id, { ageDays: 2, status: 'dead_lettered', attempts: answer('no such customer') });
    const sending = await delivery(tenant.organizationId, first.id, { ageDays: 1, status: 'retrying', attempts: answer('try later') });
    const c = await delivery(tenant.organizationId, second.id, { ageDays: 1, attempts: answer('ok'), eventId: shared });
    const untouched = await delivery(bystander.organizationId, elsewhere.id, { ageDays: 1, attempts: answer('other customer'), eventId: shared });
    await event(tenant.organizationId, shared);
    await event(bystander.organizationId, shared);
    const before = { a: await stored(a), b: await stored(b), c: await stored(c) };

    // A dry run counts and changes nothing.
    const dry = await operator(['erase', '--org', tenant.organizationId, '--dry-run', '--json']);
    expect(dry).toMatchObject({ status: 0, stderr: '' });
    expect(JSON.parse(dry.stdout)).toEqual({ organizationId: tenant.organizationId, dryRun: true, deliveries: 4, payloadsErased: 3, responseExcerptsErased: 4, open: 1, eventPayloadsErased: 1 });
    expect({ a: await stored(a), b: await stored(b), c: await stored(c) }).toEqual(before);

    // One event: its deliveries in this organization only.
    const byEvent = await operator(['erase', '--org', tenant.organizationId, '--event', shared, '--reason', 'ticket 42']);
    expect(byEvent).toMatchObject({ status: 0, stdout: expect.stringContaining('erased') });
    expect(await stored(a)).toMatchObject({ payload: '', payload_removed: 'erased', status: 'delivered', attempt_count: 1, attempts: [{ response_excerpt: null }] });
    expect(await stored(c)).toMatchObject({ payload_removed: 'erased' });
    expect(await stored(b)).toEqual(before.b);
    expect(await stored(untouched)).toMatchObject({ payload_removed: null, attempts: [{ response_excerpt: 'other customer' }] });
    expect(await storedEvent(tenant.organizationId, shared)).toEqual({ payload: {}, payload_removed: 'erased' });
    expect(await storedEvent(bystander.organizationId, shared)).toEqual({ payload: { name: 'Ada Lovelace' }, payload_removed: null });

    // Then everything of the organization, over the RPC: what was erased is not counted again.
    const operatorClient = client(OperatorService, t.url, 'connect', t.config.operatorToken);
    const all = await operatorClient.eraseDeliveryData({ organizationId: tenant.organizationId });
    expect(all).toMatchObject({ deliveries: 4n, payloadsErased: 1n, responseExcerptsErased: 2n, open: 1n, eventPayloadsErased: 0n, dryRun: false });
    expect(await stored(b)).toMatchObject({ payload: '', payload_removed: 'erased', status: 'dead_lettered', attempt_count: 1, attempts: [{ response_excerpt: null }] });
    expect(await stored(sending)).toMatchObject({ payload_removed: null, payload: expect.stringContaining('webhook.test'), attempts: [{ response_excerpt: null }] });
    const again = await operatorClient.eraseDeliveryData({ organizationId: tenant.organizationId, endpointId: second.id });
    expect(again).toMatchObject({ deliveries: 1n, payloadsErased: 0n, responseExcerptsErased: 0n });

    // Gone from the database: no row of the organization's finished deliveries holds the data.
    const leftovers = await rows(
      `select d.id from webhook_deliveries d left join delivery_attempts x on x.delivery_id = d.id
        where d.organization_id = ? and d.status <> 'retrying' and (d.payload <> '' or x.response_excerpt is not null)`,
      [tenant.organizationId],
    );
    expect(leftovers).toEqual([]);
    expect(await stored(untouched)).toMatchObject({ payload_removed: null, attempts: [{ response_excerpt: 'other customer' }] });

    // Gone from what the API and the operator CLI show.
    const shown = await t.rest('GET', `/api/v1/webhooks/${first.id}/deliveries/${b}`, { apiKey: tenant.apiKey });
    expect(shown.status).toBe(200);
    expect(shown.body.payload ?? '').toBe('');
    expect(shown.body.delivery).toMatchObject({ status: 'dead_lettered', attemptCount: 1, payloadState: 'erased' });
    expect(shown.body.attempts).toEqual([expect.not.objectContaining({ responseExcerpt: expect.anything() })]);
    const cli = await operator(['delivery', b]);
    expect(cli.stdout).toContain('payload erased');
    expect(cli.stdout).not.toContain('no such customer');
    const cliJson = JSON.parse((await operator(['delivery', b, '--json'])).stdout);
    expect(cliJson).toMatchObject({ payloadState: 'erased', attempts: [{ responseExcerpt: '' }] });
    const resend = await t.rest('POST', `/api/v1/webhooks/${first.id}/deliveries/${b}/resend`, { apiKey: tenant.apiKey, body: {} });
    expect([resend.status, resend.body.code]).toEqual([410, 'DELIVERY_PAYLOAD_ERASED']);

    // Every run is audited, the dry run included, with what it found.
    const audit = await rows(`select details from audit_events where organization_id = ? and action = 'operator.delivery_data.erase' order by id`, [tenant.organizationId]);
    expect(audit.map((e) => [e.details.dryRun, e.details.payloads])).toEqual([[true, 3], [false, 2], [false, 1], [false, 0]]);
    expect(audit[1].details).toMatchObject({ eventId: shared, reason: 'ticket 42' });
  });

  it('refuses an unknown organization or another organization\'s endpoint, and bad usage before calling', async () => {
    const tenant = await tenantOn('scale');
    const other = await tenantOn('scale');
    const theirs = await endpoint(t.orm, other.organizationId);
    const operatorClient = client(OperatorService, t.url, 'connect', t.config.operatorToken);
    expect(await failureOf(operatorClient.eraseDeliveryData({ organizationId: randomUUID() }))).toMatchObject({ reason: 'ORGANIZATION_NOT_FOUND' });
    expect(await failureOf(operatorClient.eraseDeliveryData({ organizationId: tenant.organizationId, endpointId: theirs.id }))).toMatchObject({ reason: 'WEBHOOK_NOT_FOUND' });
    expect(await operator(['erase'])).toMatchObject({ status: 2, stderr: expect.stringContaining('--org is required') });
    expect(await operator(['erase', '--org', 'nope'])).toMatchObject({ status: 2 });
  });
});
