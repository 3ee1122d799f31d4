import { ConfigError, loadConfig } from '../../src/config';
import { TEST_ENV } from '../support/app';

/** Tracing is configured by OpenTelemetry's standard variables only, and is off without an endpoint. */
const config = (env: Record<string, string>) => loadConfig({ ...TEST_ENV, ...env }).tracing;
const problems = (env: Record<string, string>) => {
  try {
    loadConfig({ ...TEST_ENV, ...env });
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
};

it('is off unless an OTLP endpoint is set, and off again when the SDK or the exporter is disabled', () => {
  expect(config({})).toBeNull();
  expect(config({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' })).toBeNull();
  expect(config({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' })).toBeNull();
  expect(config({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeNull();
});

it('sends to <endpoint>/v1/traces, or to the traces endpoint as given, parent-based and always on by default', () => {
  expect(config({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
    tracesUrl: 'http://collector:4318/v1/traces',
    serviceName: null,
    sampler: 'parentbased_always_on',
    ratio: 1,
  });
  expect(
    config({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://vendor.example/otlp/traces',
      OTEL_SERVICE_NAME: 'webhooks-eu',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.05',
    }),
  ).toEqual({ tracesUrl: 'https://vendor.example/otlp/traces', serviceName: 'webhooks-eu', sampler: 'parentbased_traceidratio', ratio: 0.05 });
});

it('refuses at start what it cannot honour, saying which variable', () => {
  const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
  expect(problems({ ...base, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toEqual([expect.stringContaining('OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf')]);
  expect(problems({ ...base, OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toEqual([expect.stringContaining('OTEL_TRACES_SAMPLER must be one of')]);
  expect(problems({ ...base, OTEL_TRACES_SAMPLER_ARG: '1.5' })).toEqual([expect.stringContaining('OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1')]);
  expect(problems({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toEqual([expect.stringContaining('must be an http(s) URL')]);
  expect(problems({ ...base, OTEL_TRACES_EXPORTER: 'zipkin' })).toEqual([expect.stringContaining('OTEL_TRACES_EXPORTER must be otlp or none')]);
});
