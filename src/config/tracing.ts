import { SAMPLERS, type SamplerName, type TracingConfig } from '../tracing';

/**
 * Tracing from OpenTelemetry's standard variables; off (null) unless an OTLP endpoint is
 * set. Honoured: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (otlp or none),
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the traces URL as is) or OTEL_EXPORTER_OTLP_ENDPOINT (its
 * base: /v1/traces is appended), OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf only),
 * OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG. The exporter itself reads
 * OTEL_EXPORTER_OTLP_[TRACES_]HEADERS and _TIMEOUT, and the batch processor OTEL_BSP_*.
 */
export function tracingConfig(env: Record<string, string | undefined>, problems: string[]): TracingConfig | null {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return null;
  const exporter = env.OTEL_TRACES_EXPORTER?.trim() || 'otlp';
  if (exporter === 'none') return null;
  if (exporter !== 'otlp') problems.push(`OTEL_TRACES_EXPORTER must be otlp or none (got "${exporter}")`);
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  const tracesUrl = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || (base ? `${base.replace(/\/+$/, '')}/v1/traces` : '');
  if (!tracesUrl) return null;
  if (!/^https?:\/\//.test(tracesUrl) || !URL.canParse(tracesUrl)) problems.push('OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT must be an http(s) URL');
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim() || env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim() || 'http/protobuf';
  if (protocol !== 'http/protobuf') problems.push(`OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf, the one this service exports with (got "${protocol}")`);
  const sampler = (env.OTEL_TRACES_SAMPLER?.trim() || 'parentbased_always_on') as SamplerName;
  if (!SAMPLERS.includes(sampler)) problems.push(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')} (got "${sampler}")`);
  const rawRatio = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = rawRatio ? Number(rawRatio) : 1;
  if (!(ratio >= 0 && ratio <= 1)) problems.push(`OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1 (got "${rawRatio}")`);
  return { tracesUrl, serviceName: env.OTEL_SERVICE_NAME?.trim() || null, sampler, ratio };
}
