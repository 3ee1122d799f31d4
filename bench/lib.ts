/**
 * The parent side of the bench protocol: starts bench children as separate Node
 * processes (tsx loader), reads their `@@bench` lines, stops them by pid, and makes sure
 * none outlives the run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { MARKER, type Segment, type SegmentCommand } from './child';

const live = new Set<ChildProcess>();

export interface Child<Ready = Record<string, unknown>> {
  name: string;
  proc: ChildProcess;
  ready: Ready;
  /** Resolves with the next message of this type. */
  next<T = Record<string, unknown>>(type: string, timeoutMs: number): Promise<T>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
  stop(graceMs?: number): Promise<void>;
  /** Resolves when the process has exited. */
  exited: Promise<void>;
}

/** Environment for children: only what Node needs, plus what the caller sets (no stray service config). */
export function baseEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ['PATH', 'HOME', 'LANG', 'TZ', 'TMPDIR']) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return { ...env, ...extra };
}

/**
 * Starts `bench/<file>` with `input` as BENCH_INPUT and (unless `waitReady: false`)
 * waits for its `ready` message.
 */
export async function startChild<Ready = Record<string, unknown>>(
  file: string,
  input: unknown,
  options: { env?: Record<string, string>; readyTimeoutMs?: number; nodeArgs?: string[]; waitReady?: boolean } = {},
): Promise<Child<Ready>> {
  const script = path.join(__dirname, file);
  const proc = spawn(process.execPath, [...(options.nodeArgs ?? []), '--import', 'tsx', script], {
    cwd: path.join(__dirname, '..'),
    env: { ...(options.env ?? baseEnv()), BENCH_INPUT: JSON.stringify(input) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  live.add(proc);
  const name = `${file}[${proc.pid}]`;
  const messages: Record<string, unknown>[] = [];
  const waiters = new Set<() => void>();
  let stderrTail = '';
  let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const exitPromise = new Promise<void>((resolve) => {
    proc.once('exit', (code, signal) => {
      exited = { code, signal };
      live.delete(proc);
      for (const wake of waiters) wake();
      resolve();
    });
  });
  proc.once('error', (error) => {
    stderrTail += `\nspawn error: ${error.message}`;
  });

  readline.createInterface({ input: proc.stdout! }).on('line', (line) => {
    if (line.startsWith(MARKER)) {
      messages.push(JSON.parse(line.slice(MARKER.length)) as Record<string, unknown>);
      for (const wake of waiters) wake();
    } else if (line.trim()) {
      process.stderr.write(`  [${name}] ${line}\n`);
    }
  });
  proc.stderr!.on('data', (chunk: Buffer) => {
    stderrTail = (stderrTail + chunk.toString('utf8')).slice(-4000);
  });

  const next = <T>(type: string, timeoutMs: number): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const check = () => {
        const index = messages.findIndex((m) => m.type === type);
        if (index >= 0) {
          const [message] = messages.splice(index, 1);
          cleanup();
          resolve(message as T);
        } else if (exited) {
          cleanup();
          reject(new Error(`${name} exited (code ${exited.code}, signal ${exited.signal}) before "${type}":\n${stderrTail.trim()}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${name} sent no "${type}" within ${timeoutMs} ms:\n${stderrTail.trim()}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });

  const ready =
    options.waitReady === false
      ? ({} as Ready)
      : await next<Ready>('ready', options.readyTimeoutMs ?? 60_000).catch(async (error: unknown) => {
          await stopProcess(proc, exitPromise, 2000);
          throw error;
        });
  return {
    name,
    proc,
    ready,
    next,
    stop: (graceMs = 15_000) => stopProcess(proc, exitPromise, graceMs),
    exited: exitPromise,
  };
}

async function stopProcess(proc: ChildProcess, exited: Promise<void>, graceMs: number): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  proc.kill('SIGTERM');
  const timer = setTimeout(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  }, graceMs);
  await exited;
  clearTimeout(timer);
}

/** A load child serving measured segments (see child.ts). */
export interface Load {
  name: string;
  pid: number | undefined;
  /** Runs one segment; rejects if the child does not answer within `timeoutMs`. */
  run(command: Omit<SegmentCommand, 'cmd'>, timeoutMs?: number): Promise<Segment>;
  close(): Promise<void>;
}

/** Starts a load child; resolves once it has warmed up and waits for commands. */
export async function startLoad(file: string, input: unknown): Promise<Load> {
  const child = await startChild(file, input, { readyTimeoutMs: 120_000 });
  return {
    name: child.name,
    pid: child.proc.pid,
    async run(command, timeoutMs) {
      child.proc.stdin!.write(`${JSON.stringify({ cmd: 'run', ...command })}\n`);
      const budget = timeoutMs ?? ((command.seconds ?? 0) * 1000 + (command.amount ?? 0) * 20 + 60_000);
      return child.next<Segment>('segment', budget);
    },
    async close() {
      if (child.proc.exitCode === null && child.proc.stdin!.writable) {
        child.proc.stdin!.write(`${JSON.stringify({ cmd: 'done' })}\n`);
        await Promise.race([child.exited, sleep(3000)]);
      }
      await child.stop(5000);
    },
  };
}

/** Kills (SIGKILL) every child still running; for error paths and the watchdog. */
export function killAllChildren(): void {
  for (const proc of live) {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  }
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ; 100 on Linux x86-64). */
const USER_HZ = 100;

/** CPU seconds (user + system) a process has used so far, from /proc; null where /proc is unavailable. */
export function cpuSecondsOf(pid: number | undefined): number | null {
  if (!pid) return null;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after "(comm)": state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / USER_HZ;
  } catch {
    return null;
  }
}

/** Runs `fn` and reports how much CPU the process `pid` used meanwhile, in cores (CPU seconds per wall second). */
export async function withCpu<T>(pid: number | undefined, fn: () => Promise<T>): Promise<{ result: T; cpuSeconds: number | null; wallSeconds: number }> {
  const cpu0 = cpuSecondsOf(pid);
  const t0 = performance.now();
  const result = await fn();
  const wallSeconds = (performance.now() - t0) / 1000;
  const cpu1 = cpuSecondsOf(pid);
  return { result, cpuSeconds: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0, wallSeconds };
}
