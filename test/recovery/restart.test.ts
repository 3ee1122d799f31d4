import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { recordDelivery } from '../support/deliveries';

/**
 * A recovery job is a row: a service that stopped in the middle of one goes on where it
 * stopped once it starts again, and resends nothing the job resent before.
 */
let database: TestDatabase;
const apps: TestApp[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  for (const app of apps) await app.close();
  await database?.drop();
});

const HOUR = 60 * 60 * 1000;

it('picks up a job left running by a stopped service and resends only what it had not', async () => {
  const first = await startTestApp({}, { listen: false, databaseUrl: database.url });
  const tenant = await first.tenant();
  // Held, so that nothing leaves for the example host: the rows say what the job did.
  await first.app.delivery.records.writeKillSwitch(first.orm.em.fork(), tenant.organizationId, true, 'restart test');
  const created = await first.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
  const endpointId: string = created.body.endpoint.id;
  const start = Date.now() - 5 * HOUR;
  const deliveries: string[] = [];
  for (let i = 0; i < 3; i++) {
    const ref = await recordDelivery(first.orm, first.app.delivery.records, tenant.organizationId, endpointId);
    await first.orm.em
      .fork()
      .execute("update webhook_deliveries set status = 'dead_lettered', attempt_count = 8, next_attempt_at = null, created_at = ? where id = ?", [
        new Date(start + (i + 1) * HOUR),
        ref.deliveryId,
      ]);
    deliveries.push(ref.deliveryId);
  }
  await first.app.close();

  // What a service stopped after the job's first batch (which resent the first delivery) leaves behind.
  const jobId = randomUUID();
  await first.orm.em.fork().execute("update webhook_deliveries set series = 2, status = 'pending', attempt_count = 0, next_attempt_at = now() where id = ?", [deliveries[0]]);
  await first.orm.em.fork().execute(
    `insert into recovery_jobs (id, organization_id, endpoint_id, since, until, requested_until, state, found, resent, after_created_at, after_id,
                                next_batch_at, requested_by, created_at, started_at, updated_at)
     values (?, ?, ?, ?, ?, null, 'running', 3, 1, ?, ?, now(), 'user:test', now(), now(), now())`,
    [jobId, tenant.organizationId, endpointId, new Date(start), new Date(), new Date(start + HOUR), deliveries[0]],
  );
  await first.orm.close();

  const second = await startTestApp({}, { listen: false, databaseUrl: database.url });
  apps.push(second);
  const deadline = Date.now() + 20_000;
  let job: Record<string, unknown>;
  for (;;) {
    const answer = await second.rest('GET', `/api/v1/webhooks/${endpointId}/recoveries/${jobId}`, { apiKey: tenant.apiKey });
    expect(answer.status).toBe(200);
    job = answer.body.recovery;
    if (job.state === 'finished') break;
    if (Date.now() > deadline) throw new Error(`job still ${String(job.state)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  expect(job).toMatchObject({ found: 3, resent: 3 });
  const rows = await second.orm.em.fork().execute<{ id: string; series: number }[]>('select id, series from webhook_deliveries where endpoint_id = ?', [endpointId]);
  // The first was resent once before the stop, not again after it; the other two once, by the restarted service.
  expect(Object.fromEntries(rows.map((r) => [r.id, r.series]))).toEqual({ [deliveries[0]!]: 2, [deliveries[1]!]: 2, [deliveries[2]!]: 2 });
});
