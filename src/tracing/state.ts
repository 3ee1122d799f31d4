/*
 * What every traced step reads: whether tracing is on. Kept apart from the SDK (setup.ts), which
 * only the processes that turn tracing on load: the command-line programs log, and so read
 * this, but would pay a second of start-up for the SDK.
 */
import type { Tracer } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';

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

/** Set by startTracing only. */
export function setActiveTracing(tracing: ActiveTracing | null): void {
  active = tracing;
}

export function tracingOn(): boolean {
  return active !== null;
}
