/**
 * The service's entry points as real processes (`npm start`'s API, `npm run worker`), each
 * its own process group with the environment given, for suites about the production
 * topology. `stopServiceProcesses()` ends every one still running; a test run that dies
 * takes them along (they are killed on this process's exit).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { serviceNodeFlags } from '../../scripts/service-node-flags';

const ROOT = path.resolve(__dirname, '../..');
const ENTRIES = { api: { entry: 'src/server/main.ts', ready: 'listening' }, worker: { entry: 'src/delivery/worker-main.ts', ready: 'delivery worker running' } } as const;

export interface ServiceProcess {
  kind: keyof typeof ENTRIES;
  pid: number;
  /** The API's base URL (null for a worker). */
  url: string | null;
  /** The last lines it printed, for a failure's message. */
  output(): string;
  /** Sends the signal to its group and waits for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const running = new Set<ChildProcess>();
function killRunning(): void {
  for (const child of running) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}
process.once('exit', killRunning);

/** Starts one and waits for its ready log line (a worker bundles the workflows first: tens of seconds on a busy machine). */
export async function startServiceProcess(kind: keyof typeof ENTRIES, env: Record<string, string>, timeoutMs = 120_000): Promise<ServiceProcess> {
  const { entry, ready } = ENTRIES[kind];
  // One process, not tsx's launcher and a child: a signal reaches the service itself.
  const child = spawn(process.execPath, ['--import', 'tsx', ...serviceNodeFlags(ROOT), entry], {
    cwd: ROOT,
    env: { ...process.env, NODE_ENV: 'test', LOG_LEVEL: 'info', ...(kind === 'api' ? { PORT: '0' } : { WORKER_METRICS_PORT: '0' }), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  running.add(child);
  const lines: string[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    running.delete(child);
    lines.push(`(exited: code ${code}, signal ${signal})`);
  });
  const readyLine = new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the ${kind} did not start within ${timeoutMs / 1000} s:\n${lines.join('\n')}`)), timeoutMs);
    let partial = '';
    const read = (chunk: Buffer) => {
      const split = (partial + chunk.toString()).split('\n');
      partial = split.pop() ?? '';
      for (const line of split) {
        lines.push(line);
        if (line.includes(`"msg":"${ready}"`)) {
          clearTimeout(timer);
          resolve(JSON.parse(line) as Record<string, unknown>);
        }
      }
      lines.splice(0, Math.max(0, lines.length - 40));
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    child.once('exit', () => {
      clearTimeout(timer);
      reject(new Error(`the ${kind} exited before it was ready:\n${lines.join('\n')}`));
    });
  });
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      return;
    }
    await exited;
  };
  try {
    const readyLog = await readyLine;
    return { kind, pid: child.pid!, url: typeof readyLog.url === 'string' ? readyLog.url : null, output: () => lines.join('\n'), stop };
  } catch (error) {
    await stop('SIGKILL');
    throw error;
  }
}

/** Ends every service process still running (SIGKILL) and waits for none to be left. */
export async function stopServiceProcesses(): Promise<void> {
  const left = [...running];
  await Promise.all(left.map((child) => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      resolve();
    }
  })));
}

/** CPU seconds a live process and every process below it have used so far, from /proc (100 ticks a second). */
export function processTreeCpuSeconds(pid: number): number {
  if (pid <= 0) return 0;
  let total = 0;
  const visit = (p: number) => {
    try {
      const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ');
      total += (Number(fields[11]) + Number(fields[12])) / 100;
      const children = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim();
      for (const child of children ? children.split(' ') : []) visit(Number(child));
    } catch {
      // Gone meanwhile.
    }
  };
  visit(pid);
  return total;
}
