import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { DeliveryMetrics, type DeliveryEvent } from '../delivery';
import type { CallObserver } from './rpc';

/**
 * Prometheus metrics of one app instance, on a registry of its own (no process-wide
 * singletons, so several apps in one process, as in tests, do not collide).
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly calls: Counter<'procedure' | 'transport' | 'code'>;
  private readonly latency: Histogram<'procedure' | 'transport'>;
  private readonly deliveries: DeliveryMetrics;
  private readonly endpointPauses: Counter<'change'>;

  constructor(sources: ConstructorParameters<typeof DeliveryMetrics>[1]) {
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
    this.deliveries = new DeliveryMetrics(this.registry, sources);
    this.endpointPauses = new Counter({
      name: 'webhook_endpoint_auto_pauses_total',
      help: 'Endpoints the service paused because their deliveries kept failing (change="paused"), and such pauses a delivered test lifted (change="lifted").',
      labelNames: ['change'],
      registers: [this.registry],
    });
  }

  readonly observeEndpointPause = (change: 'paused' | 'lifted'): void => {
    this.endpointPauses.inc({ change });
  };

  readonly observeCall: CallObserver = ({ procedure, transport, code, seconds }) => {
    this.calls.inc({ procedure, transport, code });
    this.latency.observe({ procedure, transport }, seconds);
  };

  readonly observeDelivery = (event: DeliveryEvent): void => this.deliveries.observe(event);
}
