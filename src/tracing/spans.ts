import { context, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import { activeTracing } from './state';

/** What a traced step may say about itself once it knows (how many deliveries, the outcome). */
export interface SpanNotes {
  set(attributes: Attributes): void;
  /** Marks the span failed; `reason` is a stable code or a text safe to show (never a body, path or secret). */
  fail(reason: string): void;
}

const NO_NOTES: SpanNotes = { set: () => undefined, fail: () => undefined };

function notesOf(span: Span): SpanNotes {
  return {
    set: (attributes) => span.setAttributes(attributes),
    fail: (reason) => span.setStatus({ code: SpanStatusCode.ERROR, message: reason }),
  };
}

export interface SpanOptions {
  kind?: SpanKind;
  /** The parent, when it is not the context the step runs in. */
  parent?: Context;
  /** When the step began, if before this call (epoch milliseconds). */
  startTime?: number;
}

/**
 * Runs `fn` inside a span named `name`, child of the active one, and ends the span when `fn`
 * settles; a throw marks it failed with the error's name only (an error's message may quote
 * stored data). With tracing off, `fn` runs as it would without this call; pass the attributes
 * as a function where building them costs anything.
 */
export function inSpan<T>(name: string, attributes: Attributes | (() => Attributes), fn: (notes: SpanNotes) => Promise<T>, options: SpanOptions = {}): Promise<T> {
  const tracing = activeTracing();
  if (!tracing) return fn(NO_NOTES);
  const parent = options.parent ?? context.active();
  const span = tracing.tracer.startSpan(name, { attributes: typeof attributes === 'function' ? attributes() : attributes, kind: options.kind ?? SpanKind.INTERNAL, startTime: options.startTime }, parent);
  return context.with(trace.setSpan(parent, span), async () => {
    try {
      return await fn(notesOf(span));
    } catch (error) {
      failWith(span, error);
      throw error;
    } finally {
      span.end();
    }
  });
}

/** Marks a span failed by an error, naming only its type (its message may quote stored data). */
export function failWith(span: Span, error: unknown): void {
  const type = error instanceof Error ? ((error as { kind?: unknown }).kind ?? error.name) : typeof error;
  span.setAttribute('error.type', String(type));
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Adds attributes to the span the caller runs in (a detail learnt midway, such as the attempt's number). */
export function noteInSpan(attributes: Attributes): void {
  if (!activeTracing()) return;
  trace.getActiveSpan()?.setAttributes(attributes);
}

/**
 * The active span's ids for a log line (pino's mixin), under OpenTelemetry's log field names,
 * so a line can be found from its trace and a trace from its lines. A new object every time:
 * pino writes the line's own fields into it.
 */
export function traceFields(): Record<string, string> {
  if (!activeTracing()) return {};
  const span = trace.getSpan(context.active())?.spanContext();
  if (!span || !trace.isSpanContextValid(span)) return {};
  return { trace_id: span.traceId, span_id: span.spanId, trace_flags: `0${span.traceFlags.toString(16)}` };
}

/** The ids of a delivery, as every delivery span carries them. */
export interface DeliveryIds {
  deliveryId: string;
  organizationId: string;
  endpointId: string;
  eventId: string;
}

/** The span of a step of one delivery (`delivery.attempt`, `delivery.dead_letter`, `delivery.start`). */
export function inDeliverySpan<T>(name: string, ref: DeliveryIds, fn: (notes: SpanNotes) => Promise<T>): Promise<T> {
  return inSpan(name, () => deliveryAttributes(ref), fn);
}

export function deliveryAttributes(ref: DeliveryIds): Attributes {
  return {
    'publishing.delivery_id': ref.deliveryId,
    'publishing.organization_id': ref.organizationId,
    'publishing.endpoint_id': ref.endpointId,
    'publishing.event_id': ref.eventId,
  };
}
