import { randomBytes, randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { createLogger } from '../../src/config/logger';
import { MAX_ATTEMPTS } from '../../workflows/policy';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import type { Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { signedWith, untilStored } from '../support/deliveries';
import { parentOf, parseTraceparent, spansNamed, startTracingBackend, tagOf, type JaegerSpan, type TracingBackend } from '../support/jaeger';

/**
 * One trace from the publishing call to the receiver's answer, on each engine, read back
 * from a real tracing backend (Jaeger, through its query API) as an operator would see it:
 * every span the README lists, each under the parent it names, the `traceparent` the receiver
 * got, and the trace ids in the log lines written inside the spans.
 */
const TOKEN = 'tracing-token-0123456789abcdef0123456789ab';
const INTERVAL_MS = 300;

let tls: TestTls;
let backend: TracingBackend;
beforeAll(async () => {
  tls = await makeTestTls();
  backend = await startTracingBackend('publishing-connections-test');
}, 60_000);
afterAll(async () => {
  await backend?.close();
});

/** The log lines the app wrote, parsed. */
function logSink(): { lines: Record<string, unknown>[]; stream: Writable } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, stream };
}

/** The one span named `name` whose parent is `parent`. */
function childNamed(spans: JaegerSpan[], parent: JaegerSpan, name: string): JaegerSpan {
  const found = spans.filter((s) => s.operationName === name && parentOf(s) === parent.spanID);
  if (found.length !== 1) throw new Error(`expected one ${name} under ${parent.operationName}, found ${found.length}`);
  return found[0]!;
}

describe.each(ENGINES)('on the %s engine', (engine) => {
  let t: EngineApp;
  let logs: ReturnType<typeof logSink>;
  const receivers: HttpsReceiver[] = [];

  beforeAll(async () => {
    logs = logSink();
    t = await startEngineApp(
      engine,
      {
        ...backend.env,
        INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`,
        DELIVERY_EXTRA_CA_PEM: tls.caPem,
        DELIVERY_POLL_INTERVAL_MS: '100',
        DELIVERY_TEST_RETRY_INTERVAL_MS: String(INTERVAL_MS),
      },
      { logger: createLogger('info', logs.stream) },
    );
  }, 60_000);
  afterAll(async () => {
    for (const r of receivers) await r.close();
    await t?.close();
  });

  async function subscribed(tenant: Tenant, eventType: string, respond: (index: number) => ReceiverAction): Promise<{ receiver: HttpsReceiver; secret: string }> {
    const receiver = await startHttpsReceiver({ tls, respond });
    receivers.push(receiver);
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hooks/secret-path?token=s3cr3t`, eventNames: [eventType] } });
    expect(created.status).toBe(200);
    return { receiver, secret: created.body.signingSecret as string };
  }

  /** Publishes over gRPC as an internal service whose own trace the call continues. */
  async function publish(tenant: Tenant, eventType: string): Promise<{ deliveryId: string; traceId: string; callerSpanId: string }> {
    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    const { event } = await client(EventService, t.url, 'grpc', TOKEN).publishEvent(
      { organizationId: tenant.organizationId, eventId: `evt_${randomUUID()}`, eventType, payload: { postId: 'p_1' } },
      { headers: { traceparent: `00-${traceId}-${callerSpanId}-01` } },
    );
    expect(event?.deliveries).toHaveLength(1);
    return { deliveryId: event!.deliveries[0]!.deliveryId, traceId, callerSpanId };
  }

  /**
   * From the delivery's start down to its attempts: Temporal's workflow and activity spans, or
   * the embedded engine's claims (a claim that found the committed row before the publish had
   * handed it over hangs under the publish instead).
   */
  function attemptsUnder(spans: JaegerSpan[], start: JaegerSpan, published: JaegerSpan): JaegerSpan[] {
    if (engine === 'embedded') {
      const claims = spansNamed(spans, 'delivery.claim');
      expect(claims.every((claim) => parentOf(claim) === start.spanID || parentOf(claim) === published.spanID)).toBe(true);
      return claims.map((claim) => childNamed(spans, claim, 'delivery.attempt'));
    }
    const workflowStart = childNamed(spans, start, 'StartWorkflow:deliverWebhook');
    const workflow = childNamed(spans, workflowStart, 'RunWorkflow:deliverWebhook');
    const activityStart = childNamed(spans, workflow, 'StartActivity:attemptDelivery');
    return spansNamed(spans, 'RunActivity:attemptDelivery')
      .filter((run) => parentOf(run) === activityStart.spanID)
      .map((run) => childNamed(spans, run, 'delivery.attempt'));
  }

  it('follows a published event from the call to the receiver in one trace: every span under its parent, retries included', async () => {
    const tenant = await t.tenant();
    const { receiver, secret } = await subscribed(tenant, 'post.published', (index) => ({ status: index === 0 ? 500 : 200 }));
    const { deliveryId, traceId, callerSpanId } = await publish(tenant, 'post.published');
    await untilStored(t.orm, deliveryId, (row) => row.status === 'delivered', 30_000);
    await t.idle();

    // The receiver got both attempts, signed as ever, each with the trace's traceparent.
    expect(receiver.requests).toHaveLength(2);
    const sent = receiver.requests.map((request) => {
      expect(signedWith(request, secret)).toBe(true);
      return parseTraceparent(request.headers.traceparent);
    });
    for (const traceparent of sent) expect(traceparent).toMatchObject({ traceId, sampled: true });

    // The workflow's span is exported when the workflow ends, after the attempts' spans.
    const complete = (all: JaegerSpan[]) => spansNamed(all, 'POST').length === 2 && (engine === 'embedded' || spansNamed(all, 'RunWorkflow:deliverWebhook').length === 1);
    const { spans, processes } = await backend.trace(traceId, complete);
    expect(Object.values(processes).map((p) => p.serviceName)).toContain('publishing-connections-test');

    const [rpc] = spansNamed(spans, 'publishing.internal.v1.EventService/PublishEvent');
    expect(parentOf(rpc!)).toBe(callerSpanId);
    expect(tagOf(rpc!, 'rpc.system')).toBe('grpc');
    expect(tagOf(rpc!, 'publishing.caller')).toBe('scheduler');
    expect(tagOf(rpc!, 'span.kind')).toBe('server');
    const published = childNamed(spans, rpc!, 'events.publish');
    expect(tagOf(published, 'publishing.organization_id')).toBe(tenant.organizationId);
    expect(tagOf(published, 'publishing.event_type')).toBe('post.published');
    expect(tagOf(published, 'publishing.deliveries')).toBe(1);
    const fanOut = childNamed(spans, published, 'events.fan_out');
    const start = childNamed(spans, fanOut, 'delivery.start');
    expect(tagOf(start, 'publishing.delivery_id')).toBe(deliveryId);

    const attempts = attemptsUnder(spans, start, published);
    expect(attempts.map((a) => [tagOf(a, 'publishing.attempt'), tagOf(a, 'publishing.outcome')])).toEqual([
      [1, 'failed'],
      [2, 'delivered'],
    ]);
    const requests = attempts.map((attempt) => childNamed(spans, attempt, 'POST'));
    expect(requests.map((r) => tagOf(r, 'http.response.status_code'))).toEqual([500, 200]);
    expect(requests.map((r) => r.spanID)).toEqual(sent.map((s) => s.parentId));
    for (const request of requests) {
      expect(tagOf(request, 'server.address')).toBe('127.0.0.1');
      expect(tagOf(request, 'span.kind')).toBe('client');
      // Never the path, its query, a header or the body.
      const text = JSON.stringify(request.tags);
      for (const secretPart of ['secret-path', 's3cr3t', 'x-service-signature', 'p_1', secret]) expect(text).not.toContain(secretPart);
    }
    // The retry came one interval after the failure.
    expect(attempts[1]!.startTime - attempts[0]!.startTime).toBeGreaterThanOrEqual(INTERVAL_MS * 1000 * 0.9);

    // Log lines written inside a span carry its ids.
    const call = logs.lines.find((line) => line.msg === 'call' && line.procedure === 'publishing.internal.v1.EventService/PublishEvent' && line.trace_id === traceId);
    expect(call).toMatchObject({ span_id: rpc!.spanID });
    const failed = logs.lines.find((line) => line.msg === 'delivery attempt failed' && line.deliveryId === deliveryId);
    expect(failed).toMatchObject({ trace_id: traceId, span_id: attempts[0]!.spanID });
    expect(backend.exportErrors).toEqual([]);
  });

  it(`puts the dead letter in the trace after the ${MAX_ATTEMPTS}th failed attempt`, async () => {
    const tenant = await t.tenant();
    await subscribed(tenant, 'post.failed', () => ({ status: 503 }));
    const { deliveryId, traceId } = await publish(tenant, 'post.failed');
    await untilStored(t.orm, deliveryId, (row) => row.status === 'dead_lettered', 30_000);
    await t.idle();

    const { spans } = await backend.trace(traceId, (all) => spansNamed(all, 'delivery.dead_letter').length === 1 && spansNamed(all, 'POST').length === MAX_ATTEMPTS);
    const [deadLetter] = spansNamed(spans, 'delivery.dead_letter');
    expect(tagOf(deadLetter!, 'publishing.delivery_id')).toBe(deliveryId);
    const parent = spans.find((s) => s.spanID === parentOf(deadLetter!))!;
    // Temporal runs it as an activity of its own; the embedded engine right after the last attempt, under its claim.
    expect(parent.operationName).toBe(engine === 'temporal' ? 'RunActivity:deadLetter' : 'delivery.claim');
    const attempts = spansNamed(spans, 'delivery.attempt');
    expect(attempts.map((a) => tagOf(a, 'publishing.attempt'))).toEqual(Array.from({ length: MAX_ATTEMPTS }, (_, i) => i + 1));
    expect(attempts.every((a) => tagOf(a, 'otel.status_code') === 'ERROR')).toBe(true);
  });

  it('traces a REST call under its route and organization, in a trace of its own whatever traceparent the customer sends', async () => {
    const tenant = await t.tenant();
    const customerTrace = randomBytes(16).toString('hex');
    const listed = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey, headers: { traceparent: `00-${customerTrace}-${randomBytes(8).toString('hex')}-01` } });
    expect(listed.status).toBe(200);
    const requestId = listed.headers.get('x-request-id')!;
    await backend.tracing.flush();

    const query = new URLSearchParams({ service: 'publishing-connections-test', tags: JSON.stringify({ 'publishing.request_id': requestId }), limit: '5' });
    let found: JaegerSpan[] = [];
    for (const deadline = Date.now() + 10_000; found.length === 0 && Date.now() < deadline; ) {
      const answer = (await (await fetch(`${backend.jaeger.queryUrl}/api/traces?${query}`)).json()) as { data: { spans: JaegerSpan[] }[] };
      found = answer.data.flatMap((trace) => trace.spans).filter((s) => tagOf(s, 'publishing.request_id') === requestId);
      if (found.length === 0) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(found).toHaveLength(1);
    const [span] = found;
    expect(span!.operationName).toBe('GET /api/v1/webhooks');
    expect(tagOf(span!, 'http.route')).toBe('/api/v1/webhooks');
    expect(tagOf(span!, 'publishing.transport')).toBe('rest');
    expect(tagOf(span!, 'publishing.organization_id')).toBe(tenant.organizationId);
    expect(span!.traceID).not.toBe(customerTrace);
    expect(parentOf(span!)).toBeNull();
  });
});
