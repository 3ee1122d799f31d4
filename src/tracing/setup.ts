import { context, propagation, trace } from '@opentelemetry/api';
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
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { activeTracing, setActiveTracing, type TracingConfig } from './state';

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
  if (!config || activeTracing()) return OFF;
  const resource = Resource.default().merge(new Resource({ 'service.name': config.serviceName ?? defaultServiceName }));
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url: config.tracesUrl }));
  const provider = new NodeTracerProvider({ resource, sampler: samplerOf(config), spanProcessors: [processor] });
  // The AsyncLocalStorage context manager and the W3C trace-context propagator.
  provider.register();
  setGlobalErrorHandler(onError);
  setActiveTracing({ tracer: trace.getTracer('publishing-connections'), processor, resource });
  return {
    on: true,
    flush: () => provider.forceFlush(),
    async shutdown() {
      setActiveTracing(null);
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
