import { randomUUID } from 'node:crypto';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import type { Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { storedAttempts, untilStored } from '../support/deliveries';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { makeTestTls, type TestTls } from '../support/tls';
import { within } from '../support/within';

/**
 * The automatic pause of a failing endpoint, on both engines: paused after its deliveries
 * kept failing (here 2 dead letters, no failing time: the defaults are 10 and 5 days), its
 * deliveries held without using an attempt, the customer told once (platform event to the
 * organization's other endpoints, the reason on the endpoint, an audit event, the metric),
 * and lifted by a delivered test delivery, which releases what it held.
 */
const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const INTERVAL_MS = 200;

let tls: TestTls;
beforeAll(async () => {
  tls = await makeTestTls();
});

describe.each(ENGINES)('on the %s engine', (engine) => {
  let t: EngineApp;
  const receivers: HttpsReceiver[] = [];

  beforeAll(async () => {
    t = await startEngineApp(engine, {
      INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`,
      DELIVERY_EXTRA_CA_PEM: tls.caPem,
      DELIVERY_POLL_INTERVAL_MS: '50',
      DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS),
      DELIVERY_AUTO_PAUSE_DEAD_LETTERS: '2',
      DELIVERY_AUTO_PAUSE_FAILING_MS: '0',
      DELIVERY_TEST_AUTO_PAUSE_SWEEP_MS: '100',
    });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    for (const r of receivers) await r.close();
  });

  async function endpoint(tenant: Tenant, receiver: HttpsReceiver, eventNames: string[]): Promise<string> {
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames } });
    expect(created.status).toBe(200);
    return created.body.endpoint.id as string;
  }

  async function shown(tenant: Tenant, id: string): Promise<{ state: string; pauseReason?: string; failingSince?: string }> {
    const listed = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    return listed.body.endpoints.find((e: { id: string }) => e.id === id);
  }

  async function publish(tenant: Tenant): Promise<string> {
    const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent({ organizationId: tenant.organizationId, eventId: `evt_${randomUUID()}`, eventType: 'post.held', payload: {} });
    return event!.deliveries[0]!.deliveryId;
  }

  async function audited(tenant: Tenant, id: string): Promise<string[]> {
    const rows = await t.orm.em
      .fork()
      .execute<{ action: string }[]>("select action from audit_events where organization_id = ? and target_id = ? and action like 'webhook.endpoint.auto_%' order by id", [tenant.organizationId, id]);
    return rows.map((r) => r.action);
  }

  /** The operator's metric as /metrics shows it. */
  async function pauses(change: 'paused' | 'lifted'): Promise<number> {
    const text = await (await fetch(`${t.url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`webhook_endpoint_auto_pauses_total{change="${change}"}`));
    return line ? Number(line.split(' ').at(-1)) : 0;
  }

  it('pauses an endpoint whose deliveries keep failing, tells the customer once, holds its deliveries, and a delivered test lifts it', async () => {
    const tenant = await t.tenant();
    let failing = true;
    const bad = await startHttpsReceiver({ tls, respond: () => ({ status: failing ? 500 : 200 }) });
    const watcher = await startHttpsReceiver({ tls });
    receivers.push(bad, watcher);
    const id = await endpoint(tenant, bad, ['post.held', 'webhook.test']);
    await endpoint(tenant, watcher, ['webhook.endpoint.paused', 'webhook.endpoint.resumed']);
    const pausedBefore = await pauses('paused');

    const failed = [await publish(tenant), await publish(tenant)];
    for (const deliveryId of failed) await untilStored(t.orm, deliveryId, (row) => row.status === 'dead_lettered', 60_000);
    expect(await within(30_000, async () => (await shown(tenant, id)).state === 'paused')).toBe(true);

    const endpointShown = await shown(tenant, id);
    expect(endpointShown.pauseReason).toBe('failing');
    expect(Date.parse(endpointShown.failingSince!)).toBeLessThanOrEqual(Date.now());
    const [notice] = await watcher.waitForRequests(1, 10_000);
    const body = JSON.parse(notice!.rawBody);
    expect(body).toMatchObject({ type: 'webhook.endpoint.paused', data: { endpointId: id, reason: 'failing', failingSince: endpointShown.failingSince } });
    expect(await audited(tenant, id)).toEqual(['webhook.endpoint.auto_paused']);
    expect((await pauses('paused')) - pausedBefore).toBe(1);

    // Held while paused: no attempt used, nothing sent.
    const held = await publish(tenant);
    await untilStored(t.orm, held, (row) => row.status === 'held', 30_000);
    expect(await storedAttempts(t.orm, held)).toEqual([]);
    const sentWhileFailing = bad.requests.length;

    // The endpoint is back: its test delivery goes out despite the pause and lifts it.
    failing = false;
    const test = await rest(t.url, 'POST', `/api/v1/webhooks/${id}/test`, { apiKey: tenant.apiKey });
    expect(test.status).toBe(200);
    await untilStored(t.orm, test.body.delivery.id as string, (row) => row.status === 'delivered', 30_000);
    await untilStored(t.orm, held, (row) => row.status === 'delivered', 60_000);
    expect((await shown(tenant, id)).state).toBe('active');
    await watcher.waitForRequests(2, 10_000);
    await t.idle();

    // One pause, one notice; one lift, one notice.
    expect(watcher.requests.map((r) => JSON.parse(r.rawBody).type)).toEqual(['webhook.endpoint.paused', 'webhook.endpoint.resumed']);
    expect(JSON.parse(watcher.requests[1]!.rawBody).data).toMatchObject({ endpointId: id, reason: 'test_delivered' });
    expect(await audited(tenant, id)).toEqual(['webhook.endpoint.auto_paused', 'webhook.endpoint.auto_resumed']);
    expect((await pauses('paused')) - pausedBefore).toBe(1);
    expect(bad.requests.length).toBe(sentWhileFailing + 2);
    expect((await storedAttempts(t.orm, held)).map((a) => a.response_status)).toEqual([200]);
  }, 180_000);

  it('pauses at once, without waiting out the failing period, an endpoint that answers 410 Gone', async () => {
    // The same threshold of 2 failed deliveries, but an hour of failing before a pause: only 410s waive it.
    const patient = await startEngineApp(engine, {
      INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`,
      DELIVERY_EXTRA_CA_PEM: tls.caPem,
      DELIVERY_POLL_INTERVAL_MS: '50',
      DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS),
      DELIVERY_AUTO_PAUSE_DEAD_LETTERS: '2',
      DELIVERY_AUTO_PAUSE_FAILING_MS: '3600000',
      DELIVERY_TEST_AUTO_PAUSE_SWEEP_MS: '100',
    });
    const gone = await startHttpsReceiver({ tls, respond: () => ({ status: 410 }) });
    receivers.push(gone);
    try {
      const tenant = await patient.tenant();
      const created = await rest(patient.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${gone.url}/hook`, eventNames: ['post.held'] } });
      const id = created.body.endpoint.id as string;
      const events = client(EventService, patient.url, 'grpc', TOKEN);
      for (let i = 0; i < 2; i++) await events.publishEvent({ organizationId: tenant.organizationId, eventId: `evt_${randomUUID()}`, eventType: 'post.held', payload: {} });
      const paused = await within(30_000, async () => {
        const listed = await rest(patient.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
        return listed.body.endpoints.find((e: { id: string }) => e.id === id).pauseReason === 'failing';
      });
      expect(paused).toBe(true);
      const [row] = await patient.orm.em.fork().execute<{ details: { gone?: boolean } }[]>("select details from audit_events where target_id = ? and action = 'webhook.endpoint.auto_paused'", [id]);
      expect(row?.details.gone).toBe(true);
    } finally {
      await patient.close();
    }
  }, 180_000);
});
