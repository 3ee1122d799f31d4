import { context, ROOT_CONTEXT, trace, type Context } from '@opentelemetry/api';
import { activeTracing } from './setup';
import { deliveryAttributes, type DeliveryIds } from './spans';

/** Deliveries whose trace this process keeps for the claims to come; the oldest are forgotten first. */
const REMEMBERED_DELIVERIES = 10_000;
/** A delivery claimed later than this after its start (held by a kill switch, say) begins a trace of its own. */
const REMEMBERED_FOR_MS = 60 * 60 * 1000;

/**
 * The embedded engine's side of a trace. Temporal carries a delivery's trace in its headers
 * from the start to every attempt; the embedded engine finds its deliveries by claiming rows,
 * in a poll that serves many of them. So the trace a delivery was started in (the publish's)
 * is remembered, in memory, by delivery id, and each claim of it gets a `delivery.claim`
 * span there, parent of the attempt that follows: every attempt of a delivery, retries
 * included, lands in the trace of the call that published it. A delivery this process did
 * not start (another instance's, or one from before a restart) is claimed in a trace of its
 * own. Nothing is kept with tracing off.
 */
export class ClaimTraces {
  private readonly started = new Map<string, { context: Context; at: number }>();

  /** Called where a delivery is started: keeps the active trace for its claims. */
  remember(deliveryId: string): void {
    if (!activeTracing()) return;
    this.started.delete(deliveryId);
    this.started.set(deliveryId, { context: context.active(), at: Date.now() });
    if (this.started.size > REMEMBERED_DELIVERIES) this.started.delete(this.started.keys().next().value!);
  }

  /**
   * Runs one claimed delivery's step under a `delivery.claim` span covering the claim
   * statement (from `claimedAt` to now), child of the trace the delivery was started in.
   */
  inClaim<T>(ref: DeliveryIds, claimedAt: number, batch: number, fn: () => Promise<T>): Promise<T> {
    const tracing = activeTracing();
    if (!tracing) return fn();
    const remembered = this.started.get(ref.deliveryId);
    const parent = remembered && Date.now() - remembered.at < REMEMBERED_FOR_MS ? remembered.context : ROOT_CONTEXT;
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
