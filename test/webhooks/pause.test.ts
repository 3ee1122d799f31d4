import { Code } from '@connectrpc/connect';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { failureOf } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { signedWith } from '../support/deliveries';
import { within } from '../support/within';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';

/**
 * Pausing and resuming an endpoint through both transports: the state every answer shows,
 * the refusals (another organization's endpoint, a disabled one), the audit trail, and the
 * platform events the organization's other endpoints receive. What a pause does to
 * deliveries is in test/delivery/pause-resume.test.ts.
 */
const LIFECYCLE = ['webhook.endpoint.paused', 'webhook.endpoint.resumed'];

let t: TestApp;
let receiver: HttpsReceiver;
beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls });
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20' }, { listen: false });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

async function createEndpoint(tenant: Tenant, path = '/hook', eventNames = ['webhook.test']): Promise<{ id: string; secret: string }> {
  const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}${path}`, eventNames } });
  expect(created.status).toBe(200);
  expect(created.body.endpoint.state).toBe('active');
  return { id: created.body.endpoint.id, secret: created.body.signingSecret };
}

async function listedState(tenant: Tenant, id: string): Promise<{ state: string; pausedAt?: string }> {
  const listed = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(listed.status).toBe(200);
  const endpoint = listed.body.endpoints.find((e: { id: string }) => e.id === id);
  return { state: endpoint.state, pausedAt: endpoint.pausedAt };
}

interface AuditRow {
  action: string;
  target_id: string | null;
  outcome: string;
  reason: string | null;
}

async function auditOf(organizationId: string): Promise<AuditRow[]> {
  return t.orm.em
    .fork()
    .execute<AuditRow[]>("select action, target_id, outcome, reason from audit_events where organization_id = ? and action like 'webhook.%' order by id", [organizationId]);
}

describe('REST', () => {
  it('pauses and resumes an endpoint; the state shows in every answer and in the list; each change is audited', async () => {
    const tenant = await t.tenant();
    const { id } = await createEndpoint(tenant);

    const paused = await t.rest('POST', `/api/v1/webhooks/${id}/pause`, { apiKey: tenant.apiKey });
    expect(paused.status).toBe(200);
    expect(paused.body.endpoint).toMatchObject({ id, state: 'paused', pausedAt: expect.any(String) });
    expect(paused.body.endpoint.disabled).toBeUndefined();
    expect(await listedState(tenant, id)).toEqual({ state: 'paused', pausedAt: paused.body.endpoint.pausedAt });

    // Pausing a paused endpoint changes nothing: the first pause's time stays.
    const again = await t.rest('POST', `/api/v1/webhooks/${id}/pause`, { apiKey: tenant.apiKey });
    expect(again.status).toBe(200);
    expect(again.body.endpoint).toMatchObject({ state: 'paused', pausedAt: paused.body.endpoint.pausedAt });

    const resumed = await t.rest('POST', `/api/v1/webhooks/${id}/resume`, { apiKey: tenant.apiKey });
    expect(resumed.status).toBe(200);
    expect(resumed.body.endpoint).toMatchObject({ id, state: 'active' });
    expect(resumed.body.endpoint.pausedAt).toBeUndefined();
    expect(await listedState(tenant, id)).toEqual({ state: 'active', pausedAt: undefined });

    expect(await auditOf(tenant.organizationId)).toEqual([
      { action: 'webhook.pause', target_id: id, outcome: 'succeeded', reason: null },
      { action: 'webhook.pause', target_id: id, outcome: 'succeeded', reason: null },
      { action: 'webhook.resume', target_id: id, outcome: 'succeeded', reason: null },
    ]);
  });

  it.each(['pause', 'resume'])("%s: another organization's endpoint is not found, and stays as it was", async (action) => {
    const owner = await t.tenant();
    const stranger = await t.tenant();
    const { id } = await createEndpoint(owner);
    const res = await t.rest('POST', `/api/v1/webhooks/${id}/${action}`, { apiKey: stranger.apiKey });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'WEBHOOK_NOT_FOUND' });
    expect(await listedState(owner, id)).toEqual({ state: 'active', pausedAt: undefined });
    expect(await auditOf(stranger.organizationId)).toEqual([{ action: `webhook.${action}`, target_id: null, outcome: 'refused', reason: 'WEBHOOK_NOT_FOUND' }]);
  });

  it.each(['pause', 'resume'])('%s: a disabled endpoint is refused with WEBHOOK_DISABLED and stays disabled', async (action) => {
    const tenant = await t.tenant();
    const { id } = await createEndpoint(tenant);
    expect((await t.rest('DELETE', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey })).status).toBe(200);
    const res = await t.rest('POST', `/api/v1/webhooks/${id}/${action}`, { apiKey: tenant.apiKey });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 409, code: 'WEBHOOK_DISABLED' });
    expect(await listedState(tenant, id)).toEqual({ state: 'disabled', pausedAt: undefined });
    expect(await auditOf(tenant.organizationId)).toEqual([{ action: `webhook.${action}`, target_id: id, outcome: 'refused', reason: 'WEBHOOK_DISABLED' }]);
  });

  it('deleting a paused endpoint disables it as before', async () => {
    const tenant = await t.tenant();
    const { id } = await createEndpoint(tenant);
    expect((await t.rest('POST', `/api/v1/webhooks/${id}/pause`, { apiKey: tenant.apiKey })).status).toBe(200);
    const deleted = await t.rest('DELETE', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey });
    expect(deleted.status).toBe(200);
    expect(deleted.body.endpoint).toMatchObject({ state: 'disabled', disabled: true });
    expect(deleted.body.endpoint.pausedAt).toBeUndefined();
  });
});

describe('gRPC', () => {
  it('pauses and resumes an endpoint; the list shows the state', async () => {
    const tenant = await t.tenant();
    const webhooks = t.client(WebhookService, tenant.apiKey);
    const { endpoint } = await webhooks.createWebhook({ url: `${receiver.url}/hook`, eventNames: ['webhook.test'] });
    expect(endpoint!.state).toBe('active');

    const paused = await webhooks.pauseWebhook({ id: endpoint!.id });
    expect(paused.endpoint).toMatchObject({ id: endpoint!.id, state: 'paused', disabled: false });
    expect(paused.endpoint!.pausedAt).toBeDefined();
    expect((await webhooks.listWebhooks({})).endpoints.map((e) => [e.id, e.state])).toEqual([[endpoint!.id, 'paused']]);

    const resumed = await webhooks.resumeWebhook({ id: endpoint!.id });
    expect(resumed.endpoint).toMatchObject({ id: endpoint!.id, state: 'active' });
    expect(resumed.endpoint!.pausedAt).toBeUndefined();
    expect((await webhooks.listWebhooks({})).endpoints.map((e) => [e.id, e.state])).toEqual([[endpoint!.id, 'active']]);
  });

  it.each(['pause', 'resume'] as const)("%s: another organization's endpoint is NotFound / WEBHOOK_NOT_FOUND", async (action) => {
    const owner = await t.tenant();
    const stranger = t.client(WebhookService, (await t.tenant()).apiKey);
    const { id } = await createEndpoint(owner);
    const call = action === 'pause' ? stranger.pauseWebhook({ id }) : stranger.resumeWebhook({ id });
    expect(await failureOf(call)).toEqual({ code: Code.NotFound, reason: 'WEBHOOK_NOT_FOUND' });
    expect(await listedState(owner, id)).toEqual({ state: 'active', pausedAt: undefined });
  });

  it.each(['pause', 'resume'] as const)('%s: a disabled endpoint is FailedPrecondition / WEBHOOK_DISABLED', async (action) => {
    const tenant = await t.tenant();
    const webhooks = t.client(WebhookService, tenant.apiKey);
    const { id } = await createEndpoint(tenant);
    await webhooks.deleteWebhook({ id });
    const call = action === 'pause' ? webhooks.pauseWebhook({ id }) : webhooks.resumeWebhook({ id });
    expect(await failureOf(call)).toEqual({ code: Code.FailedPrecondition, reason: 'WEBHOOK_DISABLED' });
    expect(await listedState(tenant, id)).toEqual({ state: 'disabled', pausedAt: undefined });
  });
});

describe('platform events', () => {
  it("sends webhook.endpoint.paused and .resumed, signed, to the organization's other subscribed endpoints, never to the endpoint itself", async () => {
    const tenant = await t.tenant();
    const paused = await createEndpoint(tenant, '/paused-itself', LIFECYCLE);
    const watcher = await createEndpoint(tenant, '/watcher', LIFECYCLE);
    await createEndpoint(tenant, '/unsubscribed', ['webhook.test']);
    const stranger = await t.tenant();
    await createEndpoint(stranger, '/stranger', LIFECYCLE);

    expect((await t.rest('POST', `/api/v1/webhooks/${paused.id}/pause`, { apiKey: tenant.apiKey })).status).toBe(200);
    // A second pause is no change, and no event.
    expect((await t.rest('POST', `/api/v1/webhooks/${paused.id}/pause`, { apiKey: tenant.apiKey })).status).toBe(200);
    expect((await t.rest('POST', `/api/v1/webhooks/${paused.id}/resume`, { apiKey: tenant.apiKey })).status).toBe(200);

    expect(await within(10_000, async () => receiver.requests.filter((r) => r.path === '/watcher').length >= 2)).toBe(true);
    await t.app.delivery.embedded!.idle();

    const toWatcher = receiver.requests.filter((r) => r.path === '/watcher');
    for (const request of toWatcher) expect(signedWith(request, watcher.secret)).toBe(true);
    const bodies = toWatcher.map((r) => JSON.parse(r.rawBody));
    expect(bodies.map((b) => b.type).sort()).toEqual(LIFECYCLE);
    expect(bodies.find((b) => b.type === 'webhook.endpoint.paused').data).toMatchObject({ endpointId: paused.id, pausedAt: expect.any(String) });
    expect(bodies.find((b) => b.type === 'webhook.endpoint.resumed').data).toMatchObject({ endpointId: paused.id, resumedAt: expect.any(String) });
    expect(receiver.requests.filter((r) => ['/paused-itself', '/unsubscribed', '/stranger'].includes(r.path))).toEqual([]);

    // Recorded as platform events, one per change, with deliveries to the watcher only.
    const em = t.orm.em.fork();
    const events = await em.execute<{ event_type: string; publisher: string }[]>('select event_type, publisher from events where organization_id = ? order by created_at', [
      tenant.organizationId,
    ]);
    expect(events).toEqual(LIFECYCLE.map((type) => ({ event_type: type, publisher: 'platform' })));
    const deliveries = await em.execute<{ endpoint_id: string }[]>('select endpoint_id from webhook_deliveries where organization_id = ?', [tenant.organizationId]);
    expect(deliveries.map((d) => d.endpoint_id)).toEqual([watcher.id, watcher.id]);
  });
});
