import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { MikroORM } from '../db/orm';
import type { DeliveryEvent } from '../delivery';
import type { CallObserver } from './request-context';

/**
 * Prometheus metrics of one app instance, on a registry of its own (no process-wide
 * singletons, so several apps in one process, as in tests, do not collide).
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly calls: Counter<'procedure' | 'transport' | 'code'>;
  private readonly latency: Histogram<'procedure' | 'transport'>;
  private readonly deliveries: Counter<'event'>;

  constructor(sources: { orm: MikroORM; deliveryLagSeconds: (() => Promise<number>) | null }) {
    collectDefaultMetrics({ register: this.registry });
    this.calls = new Counter({
      name: 'rpc_requests_total',
      help: 'Calls by procedure, transport (grpc, grpc-web, connect, rest) and stable code (OK on success).',
      labelNames: ['procedure', 'transport', 'code'],
      registers: [this.registry],
    });
    this.latency = new Histogram({
      name: 'rpc_request_duration_seconds',
      help: 'Call latency by procedure and transport.',
      labelNames: ['procedure', 'transport'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [this.registry],
    });
    this.deliveries = new Counter({
      name: 'webhook_delivery_events_total',
      help: 'Delivery events: attempt_delivered, attempt_failed, held (kill switch), endpoint_gone, dead_lettered.',
      labelNames: ['event'],
      registers: [this.registry],
    });
    const lag = sources.deliveryLagSeconds;
    new Gauge({
      name: 'webhook_delivery_lag_seconds',
      help: 'Embedded engine: how long the oldest due delivery has waited (0 with Temporal).',
      registers: [this.registry],
      async collect() {
        this.set(lag ? await lag() : 0);
      },
    });
    new Gauge({
      name: 'webhook_kill_switch_enabled',
      help: 'Kill switches on: scope "global" (0 or 1) and "organization" (how many organizations).',
      labelNames: ['scope'],
      registers: [this.registry],
      async collect() {
        const rows = await sources.orm.em.fork().execute<{ global: number; organizations: number }[]>(
          `select count(*) filter (where scope = 'global')::int as global, count(*) filter (where scope <> 'global')::int as organizations
             from kill_switches where enabled`,
        );
        this.set({ scope: 'global' }, rows[0]?.global ?? 0);
        this.set({ scope: 'organization' }, rows[0]?.organizations ?? 0);
      },
    });
    new Gauge({
      name: 'webhook_dead_letters',
      help: 'Deliveries on the dead-letter queue.',
      registers: [this.registry],
      async collect() {
        const [row] = await sources.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from dead_letters');
        this.set(row?.n ?? 0);
      },
    });
  }

  readonly observeCall: CallObserver = ({ procedure, transport, code, seconds }) => {
    this.calls.inc({ procedure, transport, code });
    this.latency.observe({ procedure, transport }, seconds);
  };

  readonly observeDelivery = (event: DeliveryEvent): void => {
    this.deliveries.inc({ event });
  };
}
