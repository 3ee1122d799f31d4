import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startJaeger, type Jaeger } from '../../scripts/jaeger';
import { loadConfig } from '../../src/config';
import { startTracing, type Tracing } from '../../src/tracing';
import { TEST_ENV } from './app';

/**
 * A tracing backend for a suite: Jaeger (scripts/jaeger.ts, built into .tools/ by global setup
 * when missing) on free ports, and this process's tracing turned on towards it through the
 * standard variables, as an operator would (`env` is what the suite's app should be given
 * too). Never skipped: a suite that cannot start it fails.
 */
export interface TracingBackend {
  jaeger: Jaeger;
  tracing: Tracing;
  /** OTEL_* variables pointing at this Jaeger. */
  env: Record<string, string>;
  /** What the SDK reported it could not do (an export refused): a suite expects none. */
  exportErrors: unknown[];
  /** The trace as Jaeger's query API returns it, once `ready(spans)` holds (after a flush); fails with what it last saw. */
  trace(traceId: string, ready: (spans: JaegerSpan[]) => boolean, timeoutMs?: number): Promise<JaegerTrace>;
  close(): Promise<void>;
}

/** A span as /api/traces/<id> answers it: times in microseconds, tags as a list. */
export interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references: { refType: string; traceID: string; spanID: string }[];
  startTime: number;
  duration: number;
  tags: { key: string; type: string; value: string | number | boolean }[];
  processID: string;
}

export interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string }>;
}

export async function startTracingBackend(serviceName: string): Promise<TracingBackend> {
  const jaeger = await startJaeger({ logFile: path.join(os.tmpdir(), `publishing-test-jaeger-${process.pid}.log`) });
  const env = { OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpEndpoint, OTEL_SERVICE_NAME: serviceName };
  const exportErrors: unknown[] = [];
  const tracing = startTracing(loadConfig({ ...TEST_ENV, ...env }).tracing, serviceName, (error) => exportErrors.push(error));
  if (!tracing.on) {
    await jaeger.stop();
    throw new Error('tracing did not start: another suite in this process left it on');
  }
  return {
    jaeger,
    tracing,
    env,
    exportErrors,
    async trace(traceId, ready, timeoutMs = 15_000) {
      await tracing.flush();
      const deadline = Date.now() + timeoutMs;
      let last: JaegerTrace | null = null;
      for (;;) {
        const res = await fetch(`${jaeger.queryUrl}/api/traces/${traceId}`);
        if (res.ok) {
          const body = (await res.json()) as { data: JaegerTrace[] };
          last = body.data[0] ?? null;
          if (last && ready(last.spans)) return last;
        }
        if (Date.now() > deadline) {
          const seen = last ? last.spans.map((s) => s.operationName).join(', ') : `HTTP ${res.status}`;
          throw new Error(`trace ${traceId} not complete in Jaeger within ${timeoutMs} ms; spans seen: ${seen}`);
        }
        await sleep(100);
        await tracing.flush();
      }
    },
    async close() {
      await tracing.shutdown();
      await jaeger.stop();
    },
  };
}

/** A span's tag value. */
export function tagOf(span: JaegerSpan, key: string): string | number | boolean | undefined {
  return span.tags.find((tag) => tag.key === key)?.value;
}

/** The id of a span's parent (CHILD_OF), or null for a root. */
export function parentOf(span: JaegerSpan): string | null {
  return span.references.find((ref) => ref.refType === 'CHILD_OF')?.spanID ?? null;
}

/** The spans named `name`, earliest first. */
export function spansNamed(spans: JaegerSpan[], name: string): JaegerSpan[] {
  return spans.filter((s) => s.operationName === name).sort((a, b) => a.startTime - b.startTime);
}

/** The trace id and the parent span id of a W3C `traceparent` header. */
export function parseTraceparent(header: string | string[] | undefined): { traceId: string; parentId: string; sampled: boolean } {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(String(header ?? ''));
  if (!match) throw new Error(`not a traceparent: ${String(header)}`);
  return { traceId: match[1]!, parentId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 };
}
