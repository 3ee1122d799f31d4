/**
 * The child side of the bench protocol. A child reads its input (JSON) from the
 * BENCH_INPUT environment variable and reports on stdout with lines that start with
 * `@@bench ` followed by one JSON object (`{"type":"ready",...}` once it serves). Anything
 * else on stdout or stderr is passed through by the parent for diagnosis.
 *
 * Load children are segment servers: after their warm-up they wait for commands on stdin
 * (one JSON object per line), run one measured segment per `run` command and answer with
 * a `segment` message, so the parent can alternate figure and baseline many times without
 * starting processes in between.
 */
import readline from 'node:readline';

export const MARKER = '@@bench ';

export function input<T>(): T {
  const raw = process.env.BENCH_INPUT;
  if (!raw) throw new Error('BENCH_INPUT is not set: this file is started by bench/run.ts');
  return JSON.parse(raw) as T;
}

export function emit(message: { type: string } & Record<string, unknown>): void {
  process.stdout.write(`${MARKER}${JSON.stringify(message)}\n`);
}

/** CPU seconds (user + system) this process has used so far. */
export function selfCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

/** Runs a child's main; a failure is printed and exits non-zero so the parent reports it. */
export function runMain(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}

/** Calls `stop` on SIGTERM/SIGINT or when stdin closes (the parent is gone), then exits 0. */
export function onStop(stop: () => Promise<void> | void, options: { watchStdin?: boolean } = {}): () => void {
  let stopping = false;
  const handler = () => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(1), 10_000).unref();
    Promise.resolve()
      .then(stop)
      .then(
        () => process.exit(0),
        (error: unknown) => {
          process.stderr.write(`stop failed: ${String(error)}\n`);
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
  if (options.watchStdin !== false) {
    process.stdin.on('end', handler);
    process.stdin.on('error', handler);
    process.stdin.resume();
  }
  return handler;
}

/** What one measured segment of a load child reports. */
export interface Segment {
  /** Successful operations (2xx responses, committed transactions, calls, POSTs). */
  ok: number;
  errors: number;
  non2xx: number;
  seconds: number;
  /** CPU seconds this load process used during the segment. */
  cpuSeconds: number;
  firstError: string | null;
  statusCodes?: Record<string, number>;
  /** Latencies of successful operations in ms (when asked for). */
  latencies?: number[];
}

export interface SegmentCommand {
  cmd: 'run' | 'done';
  seconds?: number;
  /** A number of operations instead of a duration (autocannon only). */
  amount?: number;
  /** A fixed offered load in requests per second, evenly spaced (load-http only); none: as fast as answered. */
  rate?: number;
  recordLatencies?: boolean;
}

/**
 * Serves segments: `warmup` first (not measured), then `ready`, then one `segment` message
 * per `run` command; `done` or a closed stdin runs `cleanup` and exits.
 */
export async function serveSegments(options: {
  warmup: () => Promise<unknown>;
  segment: (command: SegmentCommand) => Promise<Omit<Segment, 'cpuSeconds'>>;
  cleanup: () => Promise<void>;
  ready?: Record<string, unknown>;
}): Promise<void> {
  const stop = onStop(options.cleanup, { watchStdin: false });
  const warmStarted = performance.now();
  await options.warmup();
  emit({ type: 'ready', pid: process.pid, warmupSeconds: (performance.now() - warmStarted) / 1000, ...options.ready });
  const lines = readline.createInterface({ input: process.stdin });
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    const command = JSON.parse(line) as SegmentCommand;
    queue = queue.then(async () => {
      if (command.cmd === 'done') return stop();
      const cpu0 = selfCpuSeconds();
      const result = await options.segment(command);
      emit({ type: 'segment', ...result, cpuSeconds: selfCpuSeconds() - cpu0 });
    });
  });
  lines.on('close', stop);
}

/** K concurrent loops calling `once` until `seconds` have passed. */
export async function closedLoop(
  concurrency: number,
  seconds: number,
  once: (loop: number) => Promise<void>,
  recordLatencies = false,
): Promise<Omit<Segment, 'cpuSeconds'>> {
  let ok = 0;
  let errors = 0;
  let firstError: string | null = null;
  const latencies: number[] = [];
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const loop = async (index: number) => {
    while (performance.now() < deadline) {
      const t0 = performance.now();
      try {
        await once(index);
        ok++;
        if (recordLatencies) latencies.push(Math.round((performance.now() - t0) * 1000) / 1000);
      } catch (error) {
        errors++;
        firstError ??= error instanceof Error ? error.message : String(error);
        // A failing target must not turn the loop into a busy spin.
        if (errors > 1000) return;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => loop(i)));
  return { ok, errors, non2xx: 0, seconds: (performance.now() - started) / 1000, firstError, ...(recordLatencies ? { latencies } : {}) };
}
