import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { MAX_ATTEMPTS, RETRY_INTERVAL_MS } from '../../workflows/policy';
import { startEngineApp, type EngineApp, type EngineName } from '../support/engines';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { signedWith, storedAttempts, storedDeadLetters, untilStored } from '../support/deliveries';
import { startTemporalDevServer, type DevServer } from '../../scripts/temporal-server';
import { recordHistory } from './recorded-histories';
import { parseTraceparent, spansNamed, startTracingBackend, tagOf, type TracingBackend } from '../support/jaeger';

/**
 * The contract's schedule as it is, with nothing shortened: an endpoint that always fails
 * gets exactly 8 POSTs, 30 s apart (at most EARLY_MS early or LATE_MS late), then the
 * dead-letter activity runs. One case,
 * run on each engine by its own file so the two runs of ~3.5 minutes go side by side. With
 * tracing on, exported to Jaeger: the trace shows the 8 attempts 30 s apart and the dead letter.
 */
/**
 * How far an arrival-to-arrival gap may stray from the interval. Never early by more than the
 * engine's pickup and the timers' granularity; late by two attempts' dispatch times, which two
 * slow cores running the whole suite stretch (1,044 ms seen on Temporal at load 11).
 */
const EARLY_MS = 1_000;
const LATE_MS = 2_500;

export function contractTiming(engine: EngineName): void {
  let t: EngineApp;
  let receiver: HttpsReceiver;
  let backend: TracingBackend;

  let server: DevServer | null = null;

  beforeAll(async () => {
    const tls = await makeTestTls();
    backend = await startTracingBackend(`publishing-contract-timing-${engine}`);
    receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 500 }) });
    // On Temporal, a server of its own: the run's shared one also takes the other suites'
    // bursts (a 1,000-endpoint fan-out), which on two slow cores held a retry 6 s past its timer.
    if (engine === 'temporal') server = await startTemporalDevServer({ uiPort: false });
    // A 100 ms poll keeps the embedded engine's pickup within the tolerance (its default is 1 s).
    t = await startEngineApp(engine, { ...backend.env, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '100', ...(server && { TEMPORAL_ADDRESS: server.address }) });
    expect(t.config.delivery.retryIntervalMs).toBe(RETRY_INTERVAL_MS);
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await server?.stop();
    await receiver?.close();
    await backend?.close();
  });

  it(`an endpoint that always fails gets exactly ${MAX_ATTEMPTS} POSTs ${RETRY_INTERVAL_MS / 1000} s apart, then is dead-lettered`, async () => {
    const tenant = await t.tenant();
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/always-500`, eventNames: ['webhook.test'] } });
    const test = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(test.status).toBe(200);
    const { id, workflowId } = test.body.delivery as { id: string; workflowId: string };

    await untilStored(t.orm, id, (row) => row.status === 'dead_lettered', (MAX_ATTEMPTS + 1) * RETRY_INTERVAL_MS);
    await t.idle();

    expect(receiver.requests).toHaveLength(MAX_ATTEMPTS);
    for (const request of receiver.requests) expect(signedWith(request, created.body.signingSecret)).toBe(true);
    const gaps = receiver.requests.slice(1).map((request, i) => request.receivedAt - receiver.requests[i]!.receivedAt);
    for (const gap of gaps) {
      expect(gap).toBeGreaterThanOrEqual(RETRY_INTERVAL_MS - EARLY_MS);
      expect(gap).toBeLessThanOrEqual(RETRY_INTERVAL_MS + LATE_MS);
    }
    const attempts = await storedAttempts(t.orm, id);
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(await storedDeadLetters(t.orm, id)).toHaveLength(1);

    const listed = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    const mine = listed.body.endpoints.find((e: { id: string }) => e.id === created.body.endpoint.id);
    expect(mine.recentDeliveries[0]).toMatchObject({ id, status: 'dead_lettered', attemptCount: MAX_ATTEMPTS });
    const looked = await client(OperatorService, t.url, 'grpc', t.config.operatorToken).getDelivery({ deliveryId: id });
    expect(looked.delivery).toMatchObject({ status: 'dead_lettered', attemptCount: MAX_ATTEMPTS, deadLettered: true, workflowId });

    // One trace, from the test call to the dead letter: the attempts' spans 30 s apart, as the receiver saw them.
    const traceIds = new Set(receiver.requests.map((request) => parseTraceparent(request.headers.traceparent).traceId));
    expect(traceIds.size).toBe(1);
    const [traceId] = traceIds;
    const { spans } = await backend.trace(traceId!, (all) => spansNamed(all, 'delivery.dead_letter').length === 1 && spansNamed(all, 'POST').length === MAX_ATTEMPTS);
    expect(spansNamed(spans, 'delivery.attempt').map((span) => tagOf(span, 'publishing.attempt'))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // The schedule itself is held by the arrivals above; a request's span begins before
    // its arrival by the connection and the dispatch mark, which a loaded machine stretches.
    const requestSpans = spansNamed(spans, 'POST');
    const spanGaps = requestSpans.slice(1).map((span, i) => (span.startTime - requestSpans[i]!.startTime) / 1000);
    for (const gap of spanGaps) {
      expect(gap).toBeGreaterThanOrEqual(RETRY_INTERVAL_MS - 2_000);
      expect(gap).toBeLessThanOrEqual(RETRY_INTERVAL_MS + LATE_MS + 1_000);
    }
    expect(spansNamed(spans, engine === 'temporal' ? 'RunActivity:attemptDelivery' : 'delivery.claim')).toHaveLength(MAX_ATTEMPTS);
    expect(spansNamed(spans, 'POST /api/v1/webhooks/{id}/test')).toHaveLength(1);

    if (engine === 'temporal') {
      const handle = t.temporal!.client.workflow.getHandle(workflowId);
      expect(await handle.result()).toEqual({ status: 'dead_lettered' });
      expect((await handle.describe()).status.name).toBe('COMPLETED');
      const history = await handle.fetchHistory();
      const activities = (history.events ?? []).flatMap((e) => e.activityTaskScheduledEventAttributes?.activityType?.name ?? []);
      expect(activities).toEqual(['attemptDelivery', 'deadLetter']);
      await recordHistory(handle, 'dead-lettered-after-eight-30s-apart');
    }
  }, (MAX_ATTEMPTS + 3) * RETRY_INTERVAL_MS);
}
