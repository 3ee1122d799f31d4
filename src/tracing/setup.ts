import { context, propagation, trace, type Tracer } from '@opentelemetry/api';
import { setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { Resource } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

/** The samplers of the OTEL_TRACES_SAMPLER variable this service honours. */
export const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** Tracing as configured by the standard OTEL_* variables (src/config/tracing.ts reads them). */
export interface TracingConfig {
  /** Where spans go: an OTLP/HTTP (protobuf) traces URL, e.g. http://collector:4318/v1/traces. */
  tracesUrl: string;
  /** OTEL_SERVICE_NAME; null lets each process name itself (the API, the worker). */
  serviceName: string | null;
  sampler: SamplerName;
  /** OTEL_TRACES_SAMPLER_ARG: the share of new traces kept by the ratio samplers, 0 to 1. */
  ratio: number;
}

/** What a process holds while tracing is on: the one tracer, and what Temporal's workflow exporter needs. */
export interface ActiveTracing {
  tracer: Tracer;
  processor: SpanProcessor;
  resource: Resource;
}

/**
 * The process's tracing, if on. Tracing is process-wide by OpenTelemetry's design (one
 * registered provider, one context manager), so this is too; everything else reads it
 * through `activeTracing()` and does nothing at all while it is null.
 */
let active: ActiveTracing | null = null;

export function activeTracing(): ActiveTracing | null {
  return active;
}

export function tracingOn(): boolean {
  return active !== null;
}

/** The running tracing: flushes what is buffered, or stops it for good. */
export interface Tracing {
  on: boolean;
  /** Exports the spans ended so far (tests read them back right after). */
  flush(): Promise<void>;
  /** Exports what is buffered and turns tracing off. */
  shutdown(): Promise<void>;
}

const OFF: Tracing = { on: false, flush: async () => undefined, shutdown: async () => undefined };

/**
 * Turns tracing on for this process when `config` says so (null: off, and nothing is
 * installed). Call it before building anything that traces: the RPC interceptor, the
 * Temporal client and worker, and the outbound client are given their tracing when built.
 * `onError` hears what the SDK could not do (an export the backend refused or never answered).
 */
export function startTracing(config: TracingConfig | null, defaultServiceName: string, onError: (error: unknown) => void): Tracing {
  if (!config || active) return OFF;
  const resource = Resource.default().merge(new Resource({ 'service.name': config.serviceName ?? defaultServiceName }));
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url: config.tracesUrl }));
  const provider = new NodeTracerProvider({ resource, sampler: samplerOf(config), spanProcessors: [processor] });
  // The AsyncLocalStorage context manager and the W3C trace-context propagator.
  provider.register();
  setGlobalErrorHandler(onError);
  active = { tracer: trace.getTracer('publishing-connections'), processor, resource };
  return {
    on: true,
    flush: () => provider.forceFlush(),
    async shutdown() {
      active = null;
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

function samplerOf(config: TracingConfig): Sampler {
  switch (config.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(config.ratio);
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.ratio) });
  }
}
