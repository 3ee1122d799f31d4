import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { listen: false });
  // Nothing leaves the service in this file, and what the limits record is all it checks:
  // no engine works on the hundreds of deliveries it records.
  await t.app.delivery.embedded!.close();
});
afterAll(async () => t?.close());

async function endpointOf(tenant: Tenant): Promise<string> {
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://127.0.0.1:9/hook' } });
  expect(created.status).toBe(200);
  return created.body.endpoint.id;
}

const testCall = (tenant: Tenant, id: string) => t.rest('POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey });

async function deliveries(organizationId: string): Promise<number> {
  const [r] = await t.orm.em.fork().execute('select count(*)::int as n from webhook_deliveries where organization_id = ?', [organizationId]);
  return r!.n;
}

const month = () => `${new Date().toISOString().slice(0, 7)}-01`;

// The 320 calls take turns on one bucket row: on a busy machine that can outlast jest's
// default timeout, and how long they take is not what is tested.
it('320 test calls, 32 at a time: exactly 300 accepted, 20 refused with RATE_LIMITED and Retry-After', async () => {
  const tenant = await t.tenant();
  const id = await endpointOf(tenant);
  // Concurrent enough to race the shared bucket; bounded so that the calls wait on the
  // bucket, not on a pool connection (a pool wait past its bound is answered UNAVAILABLE).
  const results: Awaited<ReturnType<typeof testCall>>[] = [];
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      for (let i = 0; i < 10; i++) results.push(await testCall(tenant, id));
    }),
  );
  const ok = results.filter((r) => r.status === 200);
  const limited = results.filter((r) => r.status === 429);
  expect({ ok: ok.length, limited: limited.length }).toEqual({ ok: 300, limited: 20 });
  for (const r of limited) {
    expect(r.body.code).toBe('RATE_LIMITED');
    const retryAfter = Number(r.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
  }
  for (const r of ok) expect(r.headers.get('retry-after')).toBeNull();
  expect(await deliveries(tenant.organizationId)).toBe(300);
  const [usage] = await t.orm.em.fork().execute('select deliveries from delivery_usage where organization_id = ?', [tenant.organizationId]);
  expect(Number(usage!.deliveries)).toBe(300);
  // Another organization has its own bucket.
  const other = await t.tenant();
  expect((await testCall(other, await endpointOf(other))).status).toBe(200);
}, 120_000);

it.each(['starter', 'agency'] as const)('%s plan: 403 PLAN_EXCLUDES_WEBHOOKS and nothing recorded', async (plan) => {
  const tenant = await t.tenant({ plan });
  const id = await endpointOf(tenant);
  const res = await testCall(tenant, id);
  expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'PLAN_EXCLUDES_WEBHOOKS' });
  expect(await deliveries(tenant.organizationId)).toBe(0);
  const usage = await t.orm.em.fork().execute('select * from delivery_usage where organization_id = ?', [tenant.organizationId]);
  expect(usage).toEqual([]);
});

it('scale at 100000-1 deliveries this month: one more succeeds, the next is DELIVERY_QUOTA_EXCEEDED', async () => {
  const tenant = await t.tenant({ plan: 'scale' });
  const id = await endpointOf(tenant);
  await t.orm.em.fork().execute('insert into delivery_usage (organization_id, month, deliveries) values (?, ?, ?)', [tenant.organizationId, month(), 99_999], 'run');
  const results = await Promise.all([testCall(tenant, id), testCall(tenant, id), testCall(tenant, id)]);
  expect(results.map((r) => r.status).sort()).toEqual([200, 429, 429]);
  for (const r of results.filter((x) => x.status === 429)) {
    expect(r.body.code).toBe('DELIVERY_QUOTA_EXCEEDED');
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
  }
  const next = await testCall(tenant, id);
  expect({ status: next.status, code: next.body.code }).toEqual({ status: 429, code: 'DELIVERY_QUOTA_EXCEEDED' });
  const [usage] = await t.orm.em.fork().execute('select deliveries from delivery_usage where organization_id = ? and month = ?', [tenant.organizationId, month()]);
  expect(Number(usage!.deliveries)).toBe(100_000);
  expect(await deliveries(tenant.organizationId)).toBe(1);
});

it('enterprise with an operator quota of 2: two succeed, the third is refused', async () => {
  const tenant = await t.tenant({ plan: 'enterprise' });
  const id = await endpointOf(tenant);
  const operator = t.client(OperatorService, t.config.operatorToken);
  const set = await operator.setDeliveryQuota({ organizationId: tenant.organizationId, monthlyDeliveries: 2n });
  expect(set.monthlyDeliveries).toBe(2n);
  expect((await testCall(tenant, id)).status).toBe(200);
  expect((await testCall(tenant, id)).status).toBe(200);
  const third = await testCall(tenant, id);
  expect({ status: third.status, code: third.body.code }).toEqual({ status: 429, code: 'DELIVERY_QUOTA_EXCEEDED' });
  expect(await deliveries(tenant.organizationId)).toBe(2);
});

it('enterprise without a quota sends nothing', async () => {
  const tenant = await t.tenant({ plan: 'enterprise' });
  const id = await endpointOf(tenant);
  const res = await testCall(tenant, id);
  expect({ status: res.status, code: res.body.code }).toEqual({ status: 429, code: 'DELIVERY_QUOTA_EXCEEDED' });
  expect(await deliveries(tenant.organizationId)).toBe(0);
});
