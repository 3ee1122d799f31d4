import { randomUUID } from 'node:crypto';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { DELIVERY_SEARCH_ATTRIBUTES, MAX_DELIVERY_WORKFLOW_ID_LENGTH, workflowIdFor } from '../../src/delivery';
import { SecretBox } from '../../src/secrets';
import type { EntityManager } from '../../src/db';
import { MAX_EVENT_ID_LENGTH } from '../../src/events';
import { startEngineApp, type EngineApp } from '../support/engines';
import type { Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { signedWith, subscribedEndpoints, untilStored } from '../support/deliveries';
import { recordHistory } from './recorded-histories';

/**
 * What only Temporal promises, on the run's real development server: how a delivery's
 * workflow is named, tagged and found, that a duplicate start is a no-op, that the longest
 * ids the API allows are ids the server stores, and a 1,000-endpoint fan-out. The promises
 * both engines keep are in engine-contract.test.ts.
 */
const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const FAN_OUT = 1_000;

let t: EngineApp;
let receiver: HttpsReceiver;
let tenant: Tenant;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls });
  t = await startEngineApp('temporal', { INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`, DELIVERY_EXTRA_CA_PEM: tls.caPem });
  tenant = await t.tenant({ plan: 'command' });
}, 60_000);
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

const events = () => client(EventService, t.url, 'grpc', TOKEN);

it('runs each delivery as one workflow with the documented id, task queue, search attributes and memo; a republished event starts nothing more', async () => {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/one`, eventNames: ['post.held'] } });
  const endpointId = created.body.endpoint.id as string;
  const eventId = `evt_${randomUUID()}`;
  const publish = () => events().publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held', payload: { postId: 'p_1' } });
  const first = await publish();
  const again = await publish();
  expect(again.event?.deliveries.map((d) => d.deliveryId)).toEqual(first.event?.deliveries.map((d) => d.deliveryId));
  const [delivery] = first.event!.deliveries;
  const workflowId = `webhook-delivery/${tenant.organizationId}/${endpointId}/${eventId}`;
  expect(delivery!.workflowId).toBe(workflowId);

  await untilStored(t.orm, delivery!.deliveryId, (row) => row.status === 'delivered', 30_000);
  await t.idle();
  const handle = t.temporal!.client.workflow.getHandle(workflowId);
  expect(await handle.result()).toEqual({ status: 'delivered', attempts: 1 });
  const description = await handle.describe();
  expect(description.type).toBe('deliverWebhook');
  expect(description.taskQueue).toBe(t.temporal!.taskQueue);
  expect(description.typedSearchAttributes.get(DELIVERY_SEARCH_ATTRIBUTES.organizationId)).toBe(tenant.organizationId);
  expect(description.typedSearchAttributes.get(DELIVERY_SEARCH_ATTRIBUTES.endpointId)).toBe(endpointId);
  expect(description.typedSearchAttributes.get(DELIVERY_SEARCH_ATTRIBUTES.eventId)).toBe(eventId);
  expect(await description.memo).toEqual({ organizationId: tenant.organizationId, endpointId, eventId, eventType: 'post.held', targetHost: new URL(receiver.url).host });

  // One execution under that id, whichever way an operator looks for it.
  const found: string[] = [];
  for await (const execution of t.temporal!.client.workflow.list({ query: `EventId = "${eventId}"` })) found.push(`${execution.workflowId} ${execution.runId}`);
  expect(found).toEqual([`${workflowId} ${description.runId}`]);
  expect(receiver.requests.filter((r) => r.path === '/one')).toHaveLength(1);
  await recordHistory(handle, 'delivered-first-attempt');
}, 60_000);

it('accepts the longest organization, endpoint and event ids the API allows, and finds the delivery by its event id', async () => {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/long`, eventNames: ['post.held'] } });
  const endpointId = created.body.endpoint.id as string;
  // ":" is the one allowed character URI-encoding lengthens (to "%3A"): the longest id there can be.
  const cases = [`${'a'.repeat(MAX_EVENT_ID_LENGTH - 1)}z`, `x${':'.repeat(MAX_EVENT_ID_LENGTH - 1)}`];
  for (const eventId of cases) {
    const { event } = await events().publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' });
    const delivery = event!.deliveries.find((d) => d.endpointId === endpointId);
    expect(delivery!.workflowId).toBe(workflowIdFor({ organizationId: tenant.organizationId, endpointId, eventId }));
    expect(delivery!.workflowId.length).toBeLessThanOrEqual(MAX_DELIVERY_WORKFLOW_ID_LENGTH);
    await untilStored(t.orm, delivery!.deliveryId, (row) => row.status === 'delivered', 30_000);
    const found: string[] = [];
    for await (const execution of t.temporal!.client.workflow.list({ query: `EventId = "${eventId}" AND EndpointId = "${endpointId}"` })) found.push(execution.workflowId);
    expect(found).toEqual([delivery!.workflowId]);
  }
  expect(receiver.requests.filter((r) => r.path === '/long')).toHaveLength(cases.length);
}, 60_000);

/** Subscribers at the receiver, each at its own path, sealed as the app seals them. */
function subscribe(em: EntityManager, count: number, eventNames: string[]): Promise<Map<string, string>> {
  return subscribedEndpoints(em, new SecretBox(t.config.secretKeys, t.config.currentSecretKeyId), tenant.organizationId, { urlPrefix: `${receiver.url}/fan-out/`, count, eventNames });
}

it(`fans one event out to ${FAN_OUT} endpoints: ${FAN_OUT} workflows, and each endpoint receives it once, signed with its own secret`, async () => {
  const secrets = await subscribe(t.orm.em.fork(), FAN_OUT, ['connection.held']);
  const eventId = `evt_${randomUUID()}`;
  const { event } = await events().publishEvent({ organizationId: tenant.organizationId, eventId, eventType: 'connection.held' });
  expect(event!.deliveries).toHaveLength(FAN_OUT);

  const arrived = () => receiver.requests.filter((r) => r.path.startsWith('/fan-out/'));
  await receiver.waitForRequests(receiver.requests.length - arrived().length + FAN_OUT, 600_000);
  await t.idle();
  const byEndpoint = new Map<string, number>();
  for (const request of arrived()) {
    const endpointId = request.path.slice('/fan-out/'.length);
    byEndpoint.set(endpointId, (byEndpoint.get(endpointId) ?? 0) + 1);
    expect(signedWith(request, secrets.get(endpointId)!)).toBe(true);
    expect(JSON.parse(request.rawBody)).toMatchObject({ id: eventId, type: 'connection.held' });
  }
  expect(byEndpoint.size).toBe(FAN_OUT);
  // Once each, unless an attempt missed its deadline on a busy machine: then the delivery is
  // at-least-once. Every arrival is an attempt recorded as sent; an attempt recorded as sent
  // may also time out before the receiver has read its request (written, never read), and is
  // then a failed attempt without an answer that did not arrive.
  const rows = await t.orm.em.fork().execute<{ endpoint_id: string; status: string; attempt_count: number; successes: number; unanswered: number }[]>(
    `select d.endpoint_id, d.status, d.attempt_count,
            (select count(*)::int from delivery_attempts a where a.delivery_id = d.id and a.response_status between 200 and 299) as successes,
            (select count(*)::int from delivery_attempts a where a.delivery_id = d.id and a.response_status is null and a.error_class in ('timeout', 'connection')) as unanswered
       from webhook_deliveries d
      where d.organization_id = ? and d.event_id = ?`,
    [tenant.organizationId, eventId],
  );
  expect(rows).toHaveLength(FAN_OUT);
  const miscounted = rows.filter((row) => {
    const arrivals = byEndpoint.get(row.endpoint_id)!;
    return row.status !== 'delivered' || row.successes !== 1 || arrivals > row.attempt_count || row.attempt_count - arrivals > row.unanswered;
  });
  // On a failure, what each such delivery's attempts recorded.
  const attemptsOf = (endpointId: string) =>
    t.orm.em.fork().execute('select a.attempt, a.response_status, a.error_class, a.error from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id where d.endpoint_id = ? and d.event_id = ? order by a.attempt', [endpointId, eventId]);
  expect(await Promise.all(miscounted.map(async (row) => ({ ...row, arrivals: byEndpoint.get(row.endpoint_id), attempts: await attemptsOf(row.endpoint_id) })))).toEqual([]);
  const { count } = await t.temporal!.client.workflow.count(`EventId = "${eventId}" AND ExecutionStatus = "Completed"`);
  expect(count).toBe(FAN_OUT);
}, 660_000);
