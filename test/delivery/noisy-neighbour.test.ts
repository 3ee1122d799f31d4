import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { DEFAULT_ENDPOINT_CONCURRENCY } from '../../workflows/policy';
import type { Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { startHttpsReceiver, type HttpsReceiver, type ReceiverAction } from '../support/https-receiver';
import { makeTestTls, type TestTls } from '../support/tls';
import { within } from '../support/within';

/**
 * One customer's slow endpoints never cost another customer's deliveries, nor their own
 * attempts: organization A has 8 endpoints that answer after 9 s (inside the 10 s deadline)
 * or never answer, and publishes a burst of 100 events (800 deliveries); meanwhile
 * organization B, whose endpoint answers at once, publishes 20 events, 0.5 s apart.
 *
 * The suite does not wait for A's backlog (over a minute and a half at 4 turns per endpoint):
 * it waits for B's 20 and for A's first round of answers, then checks that nothing was lost
 * and the contract held. How long B waited is a benchmark figure (bench/figures/isolation.ts),
 * not asserted here.
 */

const TOKEN = 'scheduler-token-0123456789abcdef0123456789';
const A_ENDPOINTS = 8;
const A_EVENTS = 100;
const B_EVENTS = 20;
const SLOW_ANSWER_MS = 9_000;

interface Variant {
  name: string;
  respond: () => ReceiverAction;
  /** A's attempts that may end in a timeout: only those of an endpoint that never answers. */
  timeouts: boolean;
}

const VARIANTS: Variant[] = [
  { name: "A's endpoints answer after 9 s", respond: () => ({ status: 200, delayMs: SLOW_ANSWER_MS }), timeouts: false },
  { name: "A's endpoints never answer", respond: () => 'hang', timeouts: true },
];

let tls: TestTls;
beforeAll(async () => {
  tls = await makeTestTls();
});

interface AttemptRow {
  delivery_id: string;
  organization_id: string;
  endpoint_id: string;
  event_id: string;
  status: string;
  attempt_count: number;
  attempt: number | null;
  dispatched: boolean | null;
  finished: boolean | null;
  error_class: string | null;
}

async function attemptsOf(t: EngineApp, organizationIds: string[]): Promise<AttemptRow[]> {
  return t.orm.em.fork().execute<AttemptRow[]>(
    `select d.id as delivery_id, d.organization_id, d.endpoint_id, d.event_id, d.status, d.attempt_count,
            a.attempt, a.dispatched_at is not null as dispatched, a.finished_at is not null as finished, a.error_class
       from webhook_deliveries d left join delivery_attempts a on a.delivery_id = d.id
      where d.organization_id = any(?::uuid[])`,
    [`{${organizationIds.join(',')}}`],
  );
}

/** The most requests a receiver had open at once, each open from its arrival for `openMs`. */
function mostOpenAtOnce(receiver: HttpsReceiver, openMs: number): number {
  const arrivals = receiver.requests.map((r) => r.receivedAt).sort((a, b) => a - b);
  let most = 0;
  for (const at of arrivals) most = Math.max(most, arrivals.filter((other) => other <= at && at < other + openMs).length);
  return most;
}

function eventIdOf(rawBody: string): string {
  return (JSON.parse(rawBody) as { id: string }).id;
}

describe.each(ENGINES)('a noisy neighbour on the %s engine', (engine) => {
  it.each(VARIANTS)('delivers all of B while $name, and A loses nothing and no attempt to our queueing', async (variant) => {
    const started = Date.now();
    const t = await startEngineApp(engine, { INTERNAL_SERVICE_TOKENS: `scheduler:${TOKEN}`, DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50' });
    const aReceivers = await Promise.all(Array.from({ length: A_ENDPOINTS }, () => startHttpsReceiver({ tls, respond: variant.respond })));
    const bReceiver = await startHttpsReceiver({ tls });
    try {
      const events = client(EventService, t.url, 'grpc', TOKEN);
      const subscribe = async (tenant: Tenant, receiver: HttpsReceiver) => {
        const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['post.held'] } });
        expect(created.status).toBe(200);
      };
      const a = await t.tenant();
      const b = await t.tenant();
      for (const receiver of aReceivers) await subscribe(a, receiver);
      await subscribe(b, bReceiver);

      // B publishes once A's burst is answered: its deliveries recorded (and, on Temporal, their
      // workflows started: 800 starts would otherwise compete with B's for the development
      // server, which is not what this suite is about).
      const burst = await events.publishEvents({
        events: Array.from({ length: A_EVENTS }, (_, i) => ({ organizationId: a.organizationId, eventId: `evt_a_${i}_${randomUUID()}`, eventType: 'post.held', payload: { i } })),
      });
      expect(burst.events).toHaveLength(A_EVENTS);
      // B publishes while A's backlog is being sent; the pacing shapes the load, nothing is asserted of it.
      const bEventIds: string[] = [];
      for (let i = 0; i < B_EVENTS; i++) {
        const eventId = `evt_b_${i}_${randomUUID()}`;
        bEventIds.push(eventId);
        await events.publishEvent({ organizationId: b.organizationId, eventId, eventType: 'post.held', payload: { i } });
        await sleep(500);
      }
      await bReceiver.waitForRequests(B_EVENTS, 60_000);
      // A's first round: every endpoint's turns answered (or timed out) and recorded.
      const firstRound = A_ENDPOINTS * DEFAULT_ENDPOINT_CONCURRENCY;
      const recorded = await within(60_000, async () => {
        const rows = await attemptsOf(t, [a.organizationId]);
        return rows.filter((r) => r.finished).length >= firstRound;
      });
      expect(recorded).toBe(true);

      const rows = await attemptsOf(t, [a.organizationId, b.organizationId]);
      const aRows = rows.filter((r) => r.organization_id === a.organizationId);
      const bRows = rows.filter((r) => r.organization_id === b.organizationId);

      // Nothing lost: every event of both has its delivery, per endpoint, once.
      expect(new Set(aRows.map((r) => r.delivery_id)).size).toBe(A_EVENTS * A_ENDPOINTS);
      expect(bRows.map((r) => [r.event_id, r.status, r.attempt_count, r.attempt, r.error_class]).sort()).toEqual(
        bEventIds.map((id) => [id, 'delivered', 1, 1, null]).sort(),
      );
      expect(bReceiver.requests.map((r) => eventIdOf(r.rawBody)).sort()).toEqual([...bEventIds].sort());

      // No second request: within the first 30 s interval each A event reaches its endpoint once.
      for (const receiver of aReceivers) {
        const ids = receiver.requests.map((r) => eventIdOf(r.rawBody));
        expect(new Set(ids).size).toBe(ids.length);
      }
      // Our queueing cost A no attempt: a timeout only where the endpoint never answers, and
      // every finished attempt was sent.
      const finished = aRows.filter((r) => r.finished);
      expect(finished.every((r) => r.dispatched)).toBe(true);
      if (variant.timeouts) expect(finished.every((r) => r.error_class === 'timeout')).toBe(true);
      else {
        expect(finished.filter((r) => r.error_class !== null)).toEqual([]);
        expect(finished.every((r) => r.status === 'delivered' && r.attempt_count === 1)).toBe(true);
        // An endpoint never had more than its turns in flight.
        for (const receiver of aReceivers) expect(mostOpenAtOnce(receiver, SLOW_ANSWER_MS)).toBeLessThanOrEqual(DEFAULT_ENDPOINT_CONCURRENCY);
      }
      // Rows consistent: a delivery counts exactly its sent attempts, and has at most one open.
      const byDelivery = new Map<string, AttemptRow[]>();
      for (const r of aRows) byDelivery.set(r.delivery_id, [...(byDelivery.get(r.delivery_id) ?? []), r]);
      for (const attempts of byDelivery.values()) {
        const made = attempts.filter((r) => r.attempt !== null);
        expect(attempts[0]!.attempt_count).toBe(made.filter((r) => r.dispatched).length);
        expect(made.filter((r) => !r.finished).length).toBeLessThanOrEqual(1);
      }
      process.stdout.write(`noisy neighbour, ${engine}, ${variant.name}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    } finally {
      // A's backlog is not waited for: on Temporal its workflows are ended at once, so the next
      // case's server does not keep working for them.
      await t.temporal?.client.workflowService.startBatchOperation({
        namespace: 'default',
        jobId: randomUUID(),
        visibilityQuery: `TaskQueue = "${t.temporal.taskQueue}" AND ExecutionStatus = "Running"`,
        reason: 'noisy neighbour suite: the backlog is not waited for',
        terminationOperation: {},
      });
      await t.close();
      await Promise.all([...aReceivers, bReceiver].map((r) => r.close()));
    }
  }, 240_000);
});
