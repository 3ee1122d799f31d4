/**
 * Pickup latency: from the moment `PublishEvent` answers to the receiver's arrival of the
 * delivery, the embedded engine woken in process by the publish. Publishes go out evenly
 * spaced at half of the capacity measured just before in the same round (16 loops each
 * publishing and waiting for its delivery's arrival). Goal: p50 ≤ 2 ms and p99 ≤ 20 ms,
 * the median over PAIRS rounds.
 *
 * Information rows: the publish call's own p50/p99 (sent → answered); pickup by polling,
 * when the instance that took the publish does not wake the one that sends (a pending row
 * committed by another client, found by the service's poll every POLL_INTERVAL_MS); and how
 * long a PostgreSQL NOTIFY takes to reach a listening client, what LISTEN/NOTIFY would
 * put in the poll's place.
 */
import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { createClient } from '@connectrpc/connect';
import { benchGrpcTransport } from '../grpc-transport';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { percentile, sleep } from '../lib';
import { CONNECTIONS, DATABASE_URL, PAIRS, SEGMENT_SECONDS, addFigure, diagnostics, failedFigure, fmtMs, loadAverageMeter, log } from '../harness';
import { INTERNAL_TOKEN, POLL_INTERVAL_MS, createEndpoints, insertPending, type Context } from '../context';

export const PICKUP_GOAL_P50_MS = 2;
export const PICKUP_GOAL_P99_MS = 20;
const EVENT_TYPE = 'post.held';
const PAYLOAD = { postId: 'p_bench', connectionId: 'c_bench', scheduledAt: '2026-11-24T10:00:00.000Z', holdReason: 'connection_disabled' };
/** Samples of the polling and NOTIFY rows per round, one at a time. */
const ONE_AT_A_TIME = 20;

const epochNow = () => performance.timeOrigin + performance.now();

/** Arrivals at the receiver by event id, read from its `received` messages as they come. */
class Arrivals {
  private readonly seen = new Map<string, number>();
  private readonly waiting = new Map<string, (at: number) => void>();
  private running = true;
  private readonly pump: Promise<void>;

  constructor(ctx: Context) {
    this.pump = (async () => {
      while (this.running) {
        const message = await ctx.receiver.next<{ at: number; eventId: string | null }>('received', 500).catch(() => null);
        if (!message?.eventId) continue;
        const wake = this.waiting.get(message.eventId);
        if (wake) {
          this.waiting.delete(message.eventId);
          wake(message.at);
        } else this.seen.set(message.eventId, message.at);
      }
    })();
  }

  of(eventId: string, timeoutMs = 30_000): Promise<number> {
    const at = this.seen.get(eventId);
    if (at !== undefined) {
      this.seen.delete(eventId);
      return Promise.resolve(at);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(eventId);
        reject(new Error(`no delivery of ${eventId} reached the receiver within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.set(eventId, (arrivedAt) => {
        clearTimeout(timer);
        resolve(arrivedAt);
      });
    });
  }

  async close(): Promise<void> {
    this.running = false;
    await this.pump;
  }
}

const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
const median = (values: number[]) => percentile(sorted(values), 50);
const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length);

/** Where a round's pickups went, in mean ms: from the answer to the claim, to the dispatch mark, to the arrival. */
interface PickupPhases {
  answeredToClaimMs: number;
  claimToMarkMs: number;
  markToArrivalMs: number;
}

/** The phases of these publishes' first attempts, from the attempt rows' timestamps (the engine's clock, the bench's and the receiver's: one machine). */
async function pickupPhases(ctx: Context, organizationId: string, done: [number, number, string, number, number][]): Promise<PickupPhases> {
  const { rows } = await ctx.pool.query<{ eventId: string; startedMs: number; dispatchedMs: number }>(
    `select d.event_id as "eventId", extract(epoch from a.started_at)::float8 * 1000 as "startedMs", extract(epoch from a.dispatched_at)::float8 * 1000 as "dispatchedMs"
       from webhook_deliveries d join delivery_attempts a on a.delivery_id = d.id and a.attempt = 1
      where d.organization_id = $1 and d.event_id = any($2::text[]) and a.dispatched_at is not null`,
    [organizationId, done.map((d) => d[2])],
  );
  const byEvent = new Map(done.map((d) => [d[2], d]));
  const phases = rows.map((row) => {
    const [, , , answeredAt, arrivedAt] = byEvent.get(row.eventId)!;
    return [row.startedMs - answeredAt, row.dispatchedMs - row.startedMs, arrivedAt - row.dispatchedMs] as const;
  });
  if (phases.length !== done.length) throw new Error(`attempt rows for ${phases.length} of ${done.length} pickups`);
  return { answeredToClaimMs: mean(phases.map((p) => p[0])), claimToMarkMs: mean(phases.map((p) => p[1])), markToArrivalMs: mean(phases.map((p) => p[2])) };
}

export async function benchPickup(ctx: Context): Promise<void> {
  const name = (p: string) => `Pickup latency ${p}, PublishEvent answered → receiver, embedded engine woken in process`;
  const arrivals = new Arrivals(ctx);
  const listener = new Client({ connectionString: DATABASE_URL });
  const notifier = new Client({ connectionString: DATABASE_URL });
  try {
    const tenant = ctx.tenants.pickup!;
    await ctx.pool.query(`update organizations set plan = 'enterprise', monthly_delivery_quota = 100000000 where id = $1`, [tenant.organizationId]);
    const [endpointId] = await createEndpoints(ctx.server.ready.url, tenant, [`${ctx.receiver.ready.url}/hook/latency-pickup`], [EVENT_TYPE]);
    const client = createClient(EventService, benchGrpcTransport(ctx.server.ready.url));
    const headers = { authorization: `Bearer ${INTERNAL_TOKEN}` };
    /** One publish: [sent → answered, answered → arrival] in ms, the event id, when it was answered and arrived. */
    const publishOnce = async (): Promise<[number, number, string, number, number]> => {
      const eventId = `evt_${randomUUID()}`;
      const arrived = arrivals.of(eventId);
      const t0 = epochNow();
      const answer = await client.publishEvent({ organizationId: tenant.organizationId, eventId, eventType: EVENT_TYPE, payload: PAYLOAD }, { headers });
      const t1 = epochNow();
      if (answer.event?.deliveries.length !== 1) throw new Error(`the publish recorded ${answer.event?.deliveries.length ?? 0} deliveries, expected 1`);
      const arrivedAt = await arrived;
      return [t1 - t0, arrivedAt - t1, eventId, t1, arrivedAt];
    };
    await listener.connect();
    await notifier.connect();
    await listener.query('listen bench_pickup');
    const notified = new Map<string, (at: number) => void>();
    listener.on('notification', (n) => notified.get(n.payload ?? '')?.(epochNow()));

    for (let i = 0; i < 20; i++) await publishOnce();
    log(`pickup_latency: ${PAIRS} rounds: ${CONNECTIONS} loops publish-and-wait for ${SEGMENT_SECONDS} s (capacity), then evenly spaced publishes at half of it for ${SEGMENT_SECONDS} s; ${ONE_AT_A_TIME} polled pickups and NOTIFYs`);
    const load = loadAverageMeter();
    const perRound: { capacity: number; rate: number; call: number[]; pickup: number[]; polled: number[]; notify: number[]; phases: PickupPhases }[] = [];
    for (let round = 0; round < PAIRS; round++) {
      // Capacity: 16 loops, each publishing and waiting for its delivery to arrive.
      let completed = 0;
      const until = performance.now() + SEGMENT_SECONDS * 1000;
      await Promise.all(
        Array.from({ length: CONNECTIONS }, async () => {
          while (performance.now() < until) {
            await publishOnce();
            completed++;
          }
        }),
      );
      const capacity = completed / SEGMENT_SECONDS;
      const rate = Math.max(1, capacity / 2);
      // At half of it, evenly spaced, each publish on its own (open loop).
      const samples: Promise<[number, number, string, number, number]>[] = [];
      const count = Math.max(1, Math.round(rate * SEGMENT_SECONDS));
      const start = performance.now();
      for (let i = 0; i < count; i++) {
        const due = start + (i * 1000) / rate;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        samples.push(publishOnce());
      }
      const done = await Promise.all(samples);
      // Pickup by polling: a pending row committed by another client; nothing wakes the engine.
      const polled: number[] = [];
      for (let i = 0; i < ONE_AT_A_TIME; i++) {
        const tag = `evt_poll${round}_${i}_`;
        const arrived = arrivals.of(`${tag}000001`);
        await insertPending(ctx.pool, 'webhook_deliveries', tenant.organizationId, [endpointId!], tag, new Date(), 1);
        const committed = epochNow();
        polled.push((await arrived) - committed);
        await sleep(Math.random() * POLL_INTERVAL_MS);
      }
      // NOTIFY: from the notifying statement's answer to the listener's receipt.
      const notify: number[] = [];
      for (let i = 0; i < ONE_AT_A_TIME; i++) {
        const id = randomUUID();
        const got = new Promise<number>((resolve) => notified.set(id, resolve));
        const t0 = epochNow();
        await notifier.query('select pg_notify($1, $2)', ['bench_pickup', id]);
        notify.push((await got) - t0);
        notified.delete(id);
      }
      const phases = await pickupPhases(ctx, tenant.organizationId, done);
      const r = { capacity, rate, call: sorted(done.map((d) => d[0])), pickup: sorted(done.map((d) => d[1])), polled: sorted(polled), notify: sorted(notify), phases };
      perRound.push(r);
      load.mark();
      log(
        `  ${round + 1}/${PAIRS} capacity ${capacity.toFixed(1)}/s, at ${rate.toFixed(1)}/s: pickup p50 ${fmtMs(percentile(r.pickup, 50))} p99 ${fmtMs(percentile(r.pickup, 99))}, ` +
          `call p50 ${fmtMs(percentile(r.call, 50))}; polled p50 ${fmtMs(percentile(r.polled, 50))}; NOTIFY p50 ${fmtMs(percentile(r.notify, 50))}; ` +
          `means: answered → claim ${fmtMs(phases.answeredToClaimMs)}, claim → dispatch mark ${fmtMs(phases.claimToMarkMs)}, mark → arrival ${fmtMs(phases.markToArrivalMs)}`,
      );
    }
    const at = (key: 'call' | 'pickup' | 'polled' | 'notify', p: number) => perRound.map((r) => percentile(r[key], p));
    const rates = perRound.map((r) => r.rate);
    diagnostics.push(
      `pickup latency: capacity ${perRound.map((r) => r.capacity.toFixed(0)).join(', ')} publishes (and deliveries)/s by round, measured at half; ` +
        `polling every ${POLL_INTERVAL_MS} ms (DELIVERY_POLL_INTERVAL_MS; the service's default is 1,000 ms)`,
    );
    const phase = (key: keyof PickupPhases) => fmtMs(median(perRound.map((r) => r.phases[key])));
    diagnostics.push(
      `pickup latency by phase (the round's mean, median over rounds; the engine stamps its claim and its dispatch mark with its clock when it issues them, in whole ms): ` +
        `answered → claim issued ${phase('answeredToClaimMs')} (negative: the claim went out before the answer reached the caller), ` +
        `claim → dispatch mark issued ${phase('claimToMarkMs')} (the claim's round trip, then the connection to the receiver), ` +
        `dispatch mark → arrival ${phase('markToArrivalMs')} (the mark's round trip, then the request)`,
    );
    const row = (id: string, figure: string, values: number[], goal?: number) =>
      addFigure({
        id,
        figure,
        ratios: values,
        ratioLabel: 'ms',
        loadAverage: load.range(),
        ...(goal !== undefined ? { goal: `≤ ${goal} ms`, check: (v: number) => v <= goal } : {}),
        detail: id === 'pickup_latency_p50' ? { rounds: perRound.map((r) => ({ capacity: r.capacity, rate: r.rate, samples: r.pickup.length })), ratesPerSecond: rates } : {},
      });
    row('pickup_latency_p50', name('p50'), at('pickup', 50), PICKUP_GOAL_P50_MS);
    row('pickup_latency_p99', name('p99'), at('pickup', 99), PICKUP_GOAL_P99_MS);
    row('pickup_call_p50', '  information: the PublishEvent call itself, sent → answered (p50)', at('call', 50));
    row('pickup_call_p99', '  information: the PublishEvent call itself, sent → answered (p99)', at('call', 99));
    row('pickup_polled_p50', `  information: pickup by polling (${POLL_INTERVAL_MS} ms), row committed → receiver (p50)`, at('polled', 50));
    row('pickup_polled_p99', `  information: pickup by polling (${POLL_INTERVAL_MS} ms), row committed → receiver (p99)`, at('polled', 99));
    row('pickup_notify_p50', '  information: PostgreSQL NOTIFY → listening client (p50)', at('notify', 50));
  } catch (error) {
    failedFigure('pickup_latency_p50', name('p50'), `≤ ${PICKUP_GOAL_P50_MS} ms`, error);
  } finally {
    await arrivals.close();
    await listener.end().catch(() => undefined);
    await notifier.end().catch(() => undefined);
  }
}
