import { randomUUID } from 'node:crypto';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { turnWait } from '../../src/delivery/activities';
import { client, rest } from '../support/clients';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { makeTestTls, type TestTls } from '../support/tls';

/**
 * An endpoint's line, on both engines: with one turn (DELIVERY_ENDPOINT_CONCURRENCY=1) and a
 * receiver that answers after ANSWER_MS, a burst goes out one request at a time, each
 * delivery once, and the next one as soon as a turn frees. On Temporal the last of the
 * burst is far enough back in line that its own wait (turnWait, ±50 %) is longer than the
 * deadline below: it arrives within it only because the attempt that freed the turn woke it
 * (records/turns.ts nextInLine, the release signal).
 */

const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const BURST = 6;
const ANSWER_MS = 400;
/** Under the fallback wait of the last in line (BURST - 1 rounds ahead of it at one turn), jittered to its least. */
const LINE_DEADLINE_MS = 20_000;

let tls: TestTls;
beforeAll(async () => {
  tls = await makeTestTls();
  expect(LINE_DEADLINE_MS).toBeLessThan(turnWait(BURST - 1) * 0.5);
});

describe.each(ENGINES)('an endpoint with one turn on the %s engine', (engine) => {
  let t: EngineApp;
  let receiver: HttpsReceiver;
  beforeAll(async () => {
    t = await startEngineApp(engine, { INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_ENDPOINT_CONCURRENCY: '1' });
    receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 200, delayMs: ANSWER_MS }) });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  it('sends a burst one request at a time, each once, the next as soon as the turn frees', async () => {
    const tenant = await t.tenant();
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['post.held'] } });
    expect(created.status).toBe(200);
    const eventIds = Array.from({ length: BURST }, (_, i) => `evt_line_${i}_${randomUUID()}`);
    await client(EventService, t.url, 'grpc', TOKEN).publishEvents({
      events: eventIds.map((eventId, i) => ({ organizationId: tenant.organizationId, eventId, eventType: 'post.held', payload: { i } })),
    });

    await receiver.waitForRequests(BURST, LINE_DEADLINE_MS);
    await t.idle();

    const arrivals = receiver.requests.map((r) => r.receivedAt).sort((a, b) => a - b);
    // One at a time: each request arrived after the one before had been answered.
    for (let i = 1; i < arrivals.length; i++) expect(arrivals[i]! - arrivals[i - 1]!).toBeGreaterThanOrEqual(ANSWER_MS);
    expect(receiver.requests.map((r) => (JSON.parse(r.rawBody) as { id: string }).id).sort()).toEqual([...eventIds].sort());
    const rows = await t.orm.em.fork().execute<{ status: string; attempt_count: number; attempts: number }[]>(
      `select d.status, d.attempt_count, (select count(*)::int from delivery_attempts a where a.delivery_id = d.id) as attempts
         from webhook_deliveries d where d.organization_id = ?`,
      [tenant.organizationId],
    );
    // Waiting for the turn used no attempt and wrote none.
    expect(rows).toEqual(eventIds.map(() => ({ status: 'delivered', attempt_count: 1, attempts: 1 })));
  }, 60_000);
});
