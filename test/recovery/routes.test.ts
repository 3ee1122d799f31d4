import { ConnectError } from '@connectrpc/connect';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { toJson } from '@bufbuild/protobuf';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { recordDelivery } from '../support/deliveries';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import * as webhookPb from '../../src/gen/publishing/v1/webhook_service_pb';
import { errorInfoOf, httpStatusOf, type ErrorCode } from '../../src/errors';
import { MAX_RECOVERY_WINDOW_MS } from '../../src/recovery';

/**
 * The delivery log, resend and recovery routes over REST and gRPC, in process. A kill
 * switch holds the organization's deliveries, so what the routes record is what is
 * asserted and nothing leaves for the example hosts.
 */
let t: TestApp;
let tenant: Tenant;
let other: Tenant;

beforeAll(async () => {
  t = await startTestApp({}, { listen: false });
  tenant = await t.tenant();
  other = await t.tenant();
  for (const org of [tenant.organizationId, other.organizationId]) {
    await t.app.delivery.records.writeKillSwitch(t.orm.em.fork(), org, true, 'routes test: nothing leaves');
  }
});
afterAll(async () => t?.close());

type Answer = { ok: true; body: Record<string, any> } | { ok: false; code: ErrorCode | undefined; status?: number };

/** One route, called over REST (proto3 JSON) or gRPC (the answer as proto3 JSON too). */
interface Transport {
  name: string;
  call(apiKey: string, rpc: keyof typeof ROUTES, request: Record<string, any>): Promise<Answer>;
}

const ROUTES = {
  listWebhookDeliveries: (r: Record<string, any>) => {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(r)) {
      if (k === 'id') continue;
      for (const one of Array.isArray(v) ? v : [v]) query.append(k, String(one));
    }
    return { method: 'GET', path: `/api/v1/webhooks/${r.id}/deliveries${query.size ? `?${query}` : ''}`, body: undefined };
  },
  getWebhookDelivery: (r: Record<string, any>) => ({ method: 'GET', path: `/api/v1/webhooks/${r.id}/deliveries/${r.deliveryId}`, body: undefined }),
  resendWebhookDelivery: (r: Record<string, any>) => ({ method: 'POST', path: `/api/v1/webhooks/${r.id}/deliveries/${r.deliveryId}/resend`, body: {} }),
  recoverWebhookDeliveries: (r: Record<string, any>) => {
    const { id, ...body } = r;
    return { method: 'POST', path: `/api/v1/webhooks/${id}/recover`, body };
  },
  getWebhookRecovery: (r: Record<string, any>) => ({ method: 'GET', path: `/api/v1/webhooks/${r.id}/recoveries/${r.jobId}`, body: undefined }),
} as const;

const OUTPUTS = {
  listWebhookDeliveries: webhookPb.ListWebhookDeliveriesResponseSchema,
  getWebhookDelivery: webhookPb.GetWebhookDeliveryResponseSchema,
  resendWebhookDelivery: webhookPb.ResendWebhookDeliveryResponseSchema,
  recoverWebhookDeliveries: webhookPb.RecoverWebhookDeliveriesResponseSchema,
  getWebhookRecovery: webhookPb.GetWebhookRecoveryResponseSchema,
} as const;

const rest: Transport = {
  name: 'REST',
  async call(apiKey, rpc, request) {
    const route = ROUTES[rpc](request);
    const answer = await t.rest(route.method, route.path, { apiKey, body: route.body });
    if (answer.status === 200) return { ok: true, body: answer.body };
    return { ok: false, code: answer.body.code, status: answer.status };
  },
};

const grpc: Transport = {
  name: 'gRPC',
  async call(apiKey, rpc, request) {
    const webhooks = t.client(WebhookService, apiKey) as any;
    const message = { ...request };
    for (const key of ['since', 'until'] as const) {
      if (rpc === 'recoverWebhookDeliveries' && typeof message[key] === 'string') message[key] = timestampFromMs(Date.parse(message[key]));
    }
    try {
      const answer = await webhooks[rpc](message);
      return { ok: true, body: toJson(OUTPUTS[rpc] as any, answer) as Record<string, any> };
    } catch (error) {
      return { ok: false, code: errorInfoOf(ConnectError.from(error))?.code };
    }
  },
};

async function createEndpoint(apiKey: string, eventNames = ['webhook.test']): Promise<string> {
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey, body: { url: 'https://hooks.example.com/in', eventNames } });
  expect(created.status).toBe(200);
  return created.body.endpoint.id;
}

/** A delivery in a given state, recorded at a given time: a fixture written below the API. */
async function delivery(organizationId: string, endpointId: string, status: string, createdAt: Date, eventType = 'webhook.test'): Promise<string> {
  const ref = await recordDelivery(t.orm, t.app.delivery.records, organizationId, endpointId);
  await t.orm.em
    .fork()
    .execute(
      `update webhook_deliveries set status = ?, event_type = ?, created_at = ?, next_attempt_at = case when ? in ('pending', 'retrying') then now() + interval '1 hour' end,
              attempt_count = case when ? = 'dead_lettered' then 8 else 0 end where id = ?`,
      [status, eventType, createdAt, status, status, ref.deliveryId],
    );
  return ref.deliveryId;
}

async function quotaUsed(organizationId: string): Promise<number> {
  const [row] = await t.orm.em.fork().execute<{ deliveries: string }[]>('select coalesce(sum(deliveries), 0) as deliveries from delivery_usage where organization_id = ?', [organizationId]);
  return Number(row!.deliveries);
}

async function auditActions(organizationId: string, action: string): Promise<{ outcome: string; target_id: string | null }[]> {
  return t.orm.em.fork().execute('select outcome, target_id from audit_events where organization_id = ? and action = ? order by id', [organizationId, action]);
}

function expectRefused(answer: Answer, code: ErrorCode, transport: Transport): void {
  expect(answer).toMatchObject({ ok: false, code });
  if (transport === rest) expect((answer as { status?: number }).status).toBe(httpStatusOf(code));
}

const HOUR = 60 * 60 * 1000;

describe.each([rest, grpc])('over $name', (transport) => {
  it('lists an endpoint\'s deliveries newest first, page by page, filtered by status, event type and time', async () => {
    const endpointId = await createEndpoint(tenant.apiKey, ['webhook.test', 'post.held']);
    const base = Date.now() - 10 * HOUR;
    const ids = [
      await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date(base)),
      await delivery(tenant.organizationId, endpointId, 'delivered', new Date(base + HOUR)),
      await delivery(tenant.organizationId, endpointId, 'failed', new Date(base + 2 * HOUR), 'post.held'),
      await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date(base + 3 * HOUR)),
    ];

    const first = await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, pageSize: 3 });
    expect(first.ok).toBe(true);
    const page1 = (first as { body: any }).body;
    expect(page1.deliveries.map((d: any) => d.id)).toEqual([ids[3], ids[2], ids[1]]);
    expect(page1.deliveries[0]).toMatchObject({ status: 'dead_lettered', attemptCount: 8, eventType: 'webhook.test' });
    const second = await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, pageSize: 3, pageToken: page1.nextPageToken });
    expect((second as { body: any }).body.deliveries.map((d: any) => d.id)).toEqual([ids[0]]);
    expect((second as { body: any }).body.nextPageToken ?? '').toBe('');

    const dead = await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, status: ['dead_lettered', 'failed'] });
    expect((dead as { body: any }).body.deliveries.map((d: any) => d.id)).toEqual([ids[3], ids[2], ids[0]]);
    const held = await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, eventType: 'post.held' });
    expect((held as { body: any }).body.deliveries.map((d: any) => d.id)).toEqual([ids[2]]);
    const window = await transport.call(tenant.apiKey, 'listWebhookDeliveries', {
      id: endpointId,
      since: new Date(base + HOUR).toISOString(),
      until: new Date(base + 3 * HOUR).toISOString(),
    });
    expect((window as { body: any }).body.deliveries.map((d: any) => d.id)).toEqual([ids[2], ids[1]]);
  });

  it('refuses bad filters and page tokens with a code', async () => {
    const endpointId = await createEndpoint(tenant.apiKey);
    expectRefused(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, status: ['lost'] }), 'DELIVERY_FILTER_INVALID', transport);
    expectRefused(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, since: 'yesterday' }), 'DELIVERY_FILTER_INVALID', transport);
    // Taken as sent or refused: no day 31 of February read as March 3, no instant without its offset read in the server's zone.
    for (const since of ['2026-02-31T00:00:00Z', '2026-11-26T09:00:00', '2026-11-26T24:00:00Z']) {
      expectRefused(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, since }), 'DELIVERY_FILTER_INVALID', transport);
    }
    expect(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, since: '2026-11-26T09:00:00.5+01:00' })).toMatchObject({ ok: true });
    expectRefused(
      await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, since: '2026-11-02T00:00:00Z', until: '2026-11-01T00:00:00Z' }),
      'DELIVERY_FILTER_INVALID',
      transport,
    );
    expectRefused(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId, pageToken: 'not-a-token' }), 'PAGE_TOKEN_INVALID', transport);
  });

  it("answers another organization's endpoints, deliveries and recoveries as not found", async () => {
    const endpointId = await createEndpoint(other.apiKey);
    const deliveryId = await delivery(other.organizationId, endpointId, 'dead_lettered', new Date(Date.now() - HOUR));
    const recovered = await transport.call(other.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since: new Date(Date.now() - 2 * HOUR).toISOString() });
    expect(recovered.ok).toBe(true);
    const jobId = (recovered as { body: any }).body.recovery.id;

    expectRefused(await transport.call(tenant.apiKey, 'listWebhookDeliveries', { id: endpointId }), 'WEBHOOK_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'getWebhookDelivery', { id: endpointId, deliveryId }), 'WEBHOOK_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'resendWebhookDelivery', { id: endpointId, deliveryId }), 'WEBHOOK_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since: new Date(Date.now() - HOUR).toISOString() }), 'WEBHOOK_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'getWebhookRecovery', { id: endpointId, jobId }), 'WEBHOOK_NOT_FOUND', transport);

    // Through one of its own endpoints, the other organization's delivery and job are not found either.
    const own = await createEndpoint(tenant.apiKey);
    expectRefused(await transport.call(tenant.apiKey, 'getWebhookDelivery', { id: own, deliveryId }), 'DELIVERY_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'resendWebhookDelivery', { id: own, deliveryId }), 'DELIVERY_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'getWebhookRecovery', { id: own, jobId }), 'RECOVERY_NOT_FOUND', transport);
    expectRefused(await transport.call(tenant.apiKey, 'getWebhookDelivery', { id: own, deliveryId: 'not-a-uuid' }), 'DELIVERY_NOT_FOUND', transport);
  });

  it('resends a dead-lettered delivery as a new series, counted against the quota and audited', async () => {
    const endpointId = await createEndpoint(tenant.apiKey);
    const deliveryId = await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date(Date.now() - HOUR));
    const used = await quotaUsed(tenant.organizationId);

    const resent = await transport.call(tenant.apiKey, 'resendWebhookDelivery', { id: endpointId, deliveryId });
    expect(resent.ok).toBe(true);
    expect((resent as { body: any }).body).toMatchObject({ series: 2, delivery: { id: deliveryId } });
    expect(['pending', 'held']).toContain((resent as { body: any }).body.delivery.status);
    expect((resent as { body: any }).body.delivery.workflowId).toMatch(/\/series-2$/);
    expect(await quotaUsed(tenant.organizationId)).toBe(used + 1);
    const [row] = await t.orm.em.fork().execute<{ series: number; attempt_count: number }[]>('select series, attempt_count from webhook_deliveries where id = ?', [deliveryId]);
    expect(row).toEqual({ series: 2, attempt_count: 0 });
    expect(await t.orm.em.fork().execute('select 1 from dead_letters where delivery_id = ?', [deliveryId])).toEqual([]);
    expect(await auditActions(tenant.organizationId, 'webhook.delivery.resend')).toContainEqual({ outcome: 'succeeded', target_id: deliveryId });

    const detail = await transport.call(tenant.apiKey, 'getWebhookDelivery', { id: endpointId, deliveryId });
    expect((detail as { body: any }).body).toMatchObject({ series: 2, delivery: { id: deliveryId } });
    const payload = JSON.parse((detail as { body: any }).body.payload);
    expect(payload.id).toBe((detail as { body: any }).body.delivery.eventId);
    expect(JSON.stringify((detail as { body: any }).body)).not.toMatch(/whsec_|signature/i);
  });

  it('refuses to resend a delivery that is still pending, and on a disabled endpoint', async () => {
    const endpointId = await createEndpoint(tenant.apiKey);
    const pending = await delivery(tenant.organizationId, endpointId, 'pending', new Date());
    const used = await quotaUsed(tenant.organizationId);
    expectRefused(await transport.call(tenant.apiKey, 'resendWebhookDelivery', { id: endpointId, deliveryId: pending }), 'DELIVERY_NOT_RESENDABLE', transport);
    expect(await quotaUsed(tenant.organizationId)).toBe(used);
    expect(await auditActions(tenant.organizationId, 'webhook.delivery.resend')).toContainEqual({ outcome: 'refused', target_id: pending });

    const dead = await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date());
    expect((await t.rest('DELETE', `/api/v1/webhooks/${endpointId}`, { apiKey: tenant.apiKey })).status).toBe(200);
    expectRefused(await transport.call(tenant.apiKey, 'resendWebhookDelivery', { id: endpointId, deliveryId: dead }), 'WEBHOOK_DISABLED', transport);
  });

  it('refuses a recovery without since, backwards, or over 14 days', async () => {
    const endpointId = await createEndpoint(tenant.apiKey);
    const now = Date.now();
    expectRefused(await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId }), 'RECOVERY_WINDOW_INVALID', transport);
    expectRefused(
      await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since: new Date(now - HOUR).toISOString(), until: new Date(now - 2 * HOUR).toISOString() }),
      'RECOVERY_WINDOW_INVALID',
      transport,
    );
    expectRefused(
      await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since: new Date(now - MAX_RECOVERY_WINDOW_MS - HOUR).toISOString() }),
      'RECOVERY_WINDOW_TOO_LONG',
      transport,
    );
    expect(await t.orm.em.fork().execute('select 1 from recovery_jobs where endpoint_id = ?', [endpointId])).toEqual([]);
  });

  it('counts in a dry run, resends the window once however often it is asked, and tells subscribed endpoints when it finished', async () => {
    const endpointId = await createEndpoint(tenant.apiKey);
    const watcher = await createEndpoint(tenant.apiKey, ['webhook.recovery.finished']);
    const start = Date.now() - 5 * HOUR;
    const inWindow = [
      await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date(start + HOUR)),
      await delivery(tenant.organizationId, endpointId, 'failed', new Date(start + 2 * HOUR)),
    ];
    const delivered = await delivery(tenant.organizationId, endpointId, 'delivered', new Date(start + 2 * HOUR));
    const before = await delivery(tenant.organizationId, endpointId, 'dead_lettered', new Date(start - HOUR));
    const since = new Date(start).toISOString();
    const until = new Date(start + 3 * HOUR).toISOString();

    const dry = await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since, until, dryRun: true });
    expect((dry as { body: any }).body).toMatchObject({ found: 2, dryRun: true });
    expect((dry as { body: any }).body.recovery).toBeUndefined();
    expect(await t.orm.em.fork().execute('select 1 from recovery_jobs where endpoint_id = ?', [endpointId])).toEqual([]);
    // A dry run writes nothing but its audit event.
    expect(await auditActions(tenant.organizationId, 'webhook.recover')).toContainEqual({ outcome: 'succeeded', target_id: endpointId });

    const used = await quotaUsed(tenant.organizationId);
    const asked = await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since, until });
    expect((asked as { body: any }).body).toMatchObject({ found: 2, recovery: { found: 2, endpointId } });
    expect((asked as { body: any }).body.replayed ?? false).toBe(false);
    const jobId = (asked as { body: any }).body.recovery.id;
    const again = await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since, until });
    expect((again as { body: any }).body).toMatchObject({ replayed: true, recovery: { id: jobId } });

    const finished = await untilRecovery(tenant.apiKey, endpointId, jobId, transport, (r) => r.state === 'finished');
    expect(finished).toMatchObject({ found: 2, resent: 2 });
    const series = await t.orm.em.fork().execute<{ id: string; series: number }[]>('select id, series from webhook_deliveries where id in (?, ?, ?, ?)', [
      ...inWindow,
      delivered,
      before,
    ]);
    expect(Object.fromEntries(series.map((r) => [r.id, r.series]))).toEqual({ [inWindow[0]!]: 2, [inWindow[1]!]: 2, [delivered]: 1, [before]: 1 });
    // Two resends, and the finished event's delivery to each subscribed endpoint (this test's watcher among them).
    const [told] = await t.orm.em
      .fork()
      .execute<{ n: string }[]>("select count(*) as n from webhook_deliveries where event_type = 'webhook.recovery.finished' and payload::jsonb #>> '{data,recoveryId}' = ?", [jobId]);
    expect(await quotaUsed(tenant.organizationId)).toBe(used + 2 + Number(told!.n));
    expect(await auditActions(tenant.organizationId, 'webhook.recover')).toContainEqual({ outcome: 'succeeded', target_id: endpointId });

    // The same window asked once more after it finished: still the first job, nothing resent again.
    const late = await transport.call(tenant.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since, until });
    expect((late as { body: any }).body).toMatchObject({ replayed: true, recovery: { id: jobId, state: 'finished', resent: 2 } });
    expect(await quotaUsed(tenant.organizationId)).toBe(used + 2 + Number(told!.n));

    const events = await t.orm.em
      .fork()
      .execute<{ payload: string }[]>(
        "select payload from webhook_deliveries where endpoint_id = ? and event_type = 'webhook.recovery.finished' and payload::jsonb #>> '{data,recoveryId}' = ?",
        [watcher, jobId],
      );
    expect(events).toHaveLength(1);
    expect(JSON.parse(events[0]!.payload)).toMatchObject({ type: 'webhook.recovery.finished', data: { recoveryId: jobId, endpointId, state: 'finished', found: 2, resent: 2 } });
  });
});

async function untilRecovery(apiKey: string, endpointId: string, jobId: string, transport: Transport, done: (r: any) => boolean): Promise<any> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const answer = await transport.call(apiKey, 'getWebhookRecovery', { id: endpointId, jobId });
    if (answer.ok && done(answer.body.recovery)) return answer.body.recovery;
    if (Date.now() > deadline) throw new Error(`recovery ${jobId} never matched: ${JSON.stringify(answer)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

it('refuses a resend on a plan without webhooks', async () => {
  const starter = await t.tenant({ plan: 'starter' });
  const endpointId = await createEndpoint(starter.apiKey);
  const deliveryId = await delivery(starter.organizationId, endpointId, 'failed', new Date());
  expectRefused(await rest.call(starter.apiKey, 'resendWebhookDelivery', { id: endpointId, deliveryId }), 'PLAN_EXCLUDES_WEBHOOKS', rest);
  expectRefused(await rest.call(starter.apiKey, 'recoverWebhookDeliveries', { id: endpointId, since: new Date(Date.now() - HOUR).toISOString() }), 'PLAN_EXCLUDES_WEBHOOKS', rest);
});
