/**
 * Jaeger v2 (an OpenTelemetry Collector: OTLP in, Jaeger's query API out), built from its Go
 * module, pinned, into `.tools/`, and run with in-memory storage on ports of our choosing: the
 * tracing backend of the trace suites, and a local one for `npm start` with tracing on.
 *
 *   tsx scripts/jaeger.ts build    builds the binary if it is missing; prints its path
 *   tsx scripts/jaeger.ts start    runs one in the foreground until SIGINT/SIGTERM; prints the
 *                                  OTLP endpoint and the query API's URL
 *
 * `go install` refuses Jaeger's module (its go.mod has `replace` directives), so it is built as
 * a tool of a small module of ours, tools/jaeger (go.mod and go.sum pin every dependency).
 * Run without a configuration it would take fixed ports (4317, 4318, 16686 and more), which
 * parallel test runs on one machine cannot share; so it is always given one of our own.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, goBinary, stopChild, WATCHDOG } from './temporal-server';

export const JAEGER_MODULE = 'github.com/jaegertracing/jaeger/cmd/jaeger';
/** The version tools/jaeger/go.mod requires; the binary's path carries it, so a pin change rebuilds. */
export const JAEGER_VERSION = 'v1.76.0';

const root = path.resolve(__dirname, '..');
const wrapperModule = path.join(root, 'tools', 'jaeger');

export function jaegerBinaryPath(): string {
  return path.join(root, '.tools', `jaeger-${JAEGER_VERSION}`, 'jaeger');
}

/**
 * The binary, built when missing: about 4 minutes on two cores with a cold module cache,
 * seconds with Go's caches. Built into a directory of its own and renamed, so a build that
 * stops halfway leaves nothing.
 */
export function ensureJaegerBinary(log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): string {
  const binary = jaegerBinaryPath();
  if (existsSync(binary)) return binary;
  const staging = `${path.dirname(binary)}.build-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  log(`jaeger: building ${JAEGER_MODULE}@${JAEGER_VERSION} into .tools/ (minutes the first time)`);
  const started = Date.now();
  const built = spawnSync(goBinary(), ['build', '-o', path.join(staging, 'jaeger'), JAEGER_MODULE], {
    cwd: wrapperModule,
    env: { ...process.env, CGO_ENABLED: '0' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (built.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    throw new Error(`go build ${JAEGER_MODULE} (tools/jaeger) failed (exit ${built.status ?? built.signal})`);
  }
  rmSync(path.dirname(binary), { recursive: true, force: true });
  renameSync(staging, path.dirname(binary));
  log(`jaeger: built in ${Math.round((Date.now() - started) / 1000)} s`);
  return binary;
}

export interface Jaeger {
  /** OTLP/HTTP base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (traces go to <it>/v1/traces). */
  otlpEndpoint: string;
  /** Base URL of the query API: /api/traces/<id>, /api/services. */
  queryUrl: string;
  pid: number;
  stop(): Promise<void>;
}

/** Everything on loopback, on the ports given: OTLP/HTTP in, memory storage, the query API (HTTP and its gRPC twin) out. */
function configuration(ports: { otlp: number; query: number; queryGrpc: number }): string {
  return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:${ports.query}
    grpc:
      endpoint: 127.0.0.1:${ports.queryGrpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${ports.otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
`;
}

/**
 * Starts Jaeger and waits until its query API answers. Like the Temporal server, it runs
 * under a small shell that stops it when this process's end of the pipe closes (WATCHDOG), so
 * a test run that dies leaves no Jaeger behind.
 */
export async function startJaeger(options: { logFile?: string } = {}): Promise<Jaeger> {
  const binary = ensureJaegerBinary();
  const ports = { otlp: await freePort(), query: await freePort(), queryGrpc: await freePort() };
  const dir = mkdtempSync(path.join(os.tmpdir(), 'publishing-jaeger-'));
  const config = path.join(dir, 'config.yaml');
  writeFileSync(config, configuration(ports));
  const out = options.logFile ? openSync(options.logFile, 'a') : 'ignore';
  const child = spawn('sh', ['-c', WATCHDOG, 'jaeger', binary, '--config', config], { stdio: ['pipe', out, out], detached: true });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const queryUrl = `http://127.0.0.1:${ports.query}`;
  const stop = async () => {
    await stopChild(child, exited, 'SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`jaeger exited at start (code ${child.exitCode})${options.logFile ? `; see ${options.logFile}` : ''}`);
    }
    const answered = await fetch(`${queryUrl}/api/services`).then(
      (res) => res.ok,
      () => false,
    );
    if (answered) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error('jaeger did not answer on its query port within 60 s');
    }
    await sleep(200);
  }
  return { otlpEndpoint: `http://127.0.0.1:${ports.otlp}`, queryUrl, pid: child.pid!, stop };
}

async function command(): Promise<void> {
  const [what] = process.argv.slice(2);
  if (what === 'build') {
    process.stdout.write(`${ensureJaegerBinary()}\n`);
    return;
  }
  if (what === 'start') {
    const jaeger = await startJaeger();
    process.stdout.write(`OTEL_EXPORTER_OTLP_ENDPOINT=${jaeger.otlpEndpoint}\nquery API: ${jaeger.queryUrl}/api/services\n`);
    const stop = () => void jaeger.stop().then(() => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    return;
  }
  process.stderr.write('usage: tsx scripts/jaeger.ts build|start\n');
  process.exitCode = 2;
}

if (require.main === module) {
  command().catch((error: unknown) => {
    process.stderr.write(`jaeger: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  });
}
