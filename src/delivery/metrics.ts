import { Counter, Gauge, type Registry } from 'prom-client';
import type { MikroORM } from '../db';
import type { DeliveryEvent } from './activities';
import type { DeliveryRecords } from './records';

/**
 * Delivery metrics, the same in the API process and the Temporal worker: whichever process
 * runs attempts counts their events, and both report the state the rows show.
 */
export class DeliveryMetrics {
  private readonly events: Counter<'event'>;

  constructor(registry: Registry, sources: { orm: MikroORM; records: DeliveryRecords; engineReachable?: () => Promise<boolean> }) {
    const { orm, records, engineReachable } = sources;
    this.events = new Counter({
      name: 'webhook_delivery_events_total',
      help: 'Delivery events: attempt_delivered, attempt_failed, held (kill switch), endpoint_gone, dead_lettered.',
      labelNames: ['event'],
      registers: [registry],
    });
    new Gauge({
      name: 'webhook_delivery_lag_seconds',
      help: 'How long the oldest due delivery has waited for its attempt (the rows mirror the schedule of both engines).',
      registers: [registry],
      async collect() {
        this.set(await records.lagSeconds(orm.em.fork()));
      },
    });
    new Gauge({
      name: 'webhook_kill_switch_enabled',
      help: 'Kill switches on: scope "global" (0 or 1) and "organization" (how many organizations).',
      labelNames: ['scope'],
      registers: [registry],
      async collect() {
        const on = await records.killSwitchesOn(orm.em.fork());
        this.set({ scope: 'global' }, on.global);
        this.set({ scope: 'organization' }, on.organizations);
      },
    });
    new Gauge({
      name: 'webhook_dead_letters',
      help: 'Deliveries on the dead-letter queue.',
      registers: [registry],
      async collect() {
        this.set(await records.deadLetterCount(orm.em.fork()));
      },
    });
    new Gauge({
      name: 'webhook_delivery_engine_reachable',
      help: 'Whether the delivery engine answers: Temporal from this process (1 or 0); always 1 for the embedded engine.',
      registers: [registry],
      async collect() {
        this.set(engineReachable ? Number(await engineReachable()) : 1);
      },
    });
  }

  readonly observe = (event: DeliveryEvent): void => {
    this.events.inc({ event });
  };
}
