import { context, ROOT_CONTEXT, trace, type Context } from '@opentelemetry/api';
import { activeTracing } from './state';
import { deliveryAttributes, type DeliveryIds } from './spans';

/** Deliveries and events whose trace this process keeps for the claims to come; the oldest are forgotten first. */
const REMEMBERED = 10_000;
/** A delivery claimed later than this after its start (held by a kill switch, say) begins a trace of its own. */
const REMEMBERED_FOR_MS = 60 * 60 * 1000;

/**
 * The traces deliveries were started in, by delivery id, and by event for the deliveries an
 * event is about to make (see expectDeliveries). Process-wide, as the traces themselves are.
 */
const started = new Map<string, { context: Context; at: number }>();

function keep(key: string): void {
  started.delete(key);
  started.set(key, { context: context.active(), at: Date.now() });
  if (started.size > REMEMBERED) started.delete(started.keys().next().value!);
}

function recalled(key: string): Context | null {
  const found = started.get(key);
  return found && Date.now() - found.at < REMEMBERED_FOR_MS ? found.context : null;
}

const eventKey = (organizationId: string, eventId: string) => `event/${organizationId}/${eventId}`;

/**
 * Called before an event's deliveries are written: the embedded engine may claim a committed
 * row before the caller has handed it over (engine.start), and that first claim must find the
 * trace too. Nothing is kept with tracing off.
 */
export function expectDeliveries(events: readonly { organizationId: string; eventId: string }[]): void {
  if (!activeTracing()) return;
  for (const event of events) keep(eventKey(event.organizationId, event.eventId));
}

/**
 * The embedded engine's side of a trace. Temporal carries a delivery's trace in its headers
 * from the start to every attempt; the embedded engine finds its deliveries by claiming rows,
 * in a poll that serves many of them. So the trace a delivery was started in (the publish's)
 * is remembered, in memory, and each claim of it gets a `delivery.claim` span there, parent of
 * the attempt that follows: every attempt of a delivery, retries included, lands in the trace
 * of the call that published it. A delivery this process did not start (another instance's,
 * or one from before a restart) is claimed in a trace of its own.
 */
export class ClaimTraces {
  /** Called where a delivery is started: keeps the active trace for its claims. */
  remember(deliveryId: string): void {
    if (activeTracing()) keep(deliveryId);
  }

  /**
   * Runs one claimed delivery's step under a `delivery.claim` span covering the claim
   * statement (from `claimedAt` to now), child of the trace the delivery was started in.
   */
  inClaim<T>(ref: DeliveryIds, claimedAt: number, batch: number, fn: () => Promise<T>): Promise<T> {
    const tracing = activeTracing();
    if (!tracing) return fn();
    const parent = recalled(ref.deliveryId) ?? recalled(eventKey(ref.organizationId, ref.eventId)) ?? ROOT_CONTEXT;
    const span = tracing.tracer.startSpan(
      'delivery.claim',
      { startTime: claimedAt, attributes: { ...deliveryAttributes(ref), 'publishing.engine': 'embedded', 'publishing.claimed': batch } },
      parent,
    );
    span.end();
    return context.with(trace.setSpan(parent, span), fn);
  }

  /**
   * Runs the engine's poll outside any trace: a poll woken by a publish would otherwise carry
   * that call's trace into every poll after it (timers keep the context they were set in).
   */
  outsideTraces<T>(fn: () => T): T {
    return activeTracing() ? context.with(ROOT_CONTEXT, fn) : fn();
  }
}
