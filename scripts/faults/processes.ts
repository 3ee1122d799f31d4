/**
 * The service's entry points as child processes of the fault run (the API, the delivery
 * worker), started as production runs them, and stopped: each is its own process group, so
 * nothing it spawned survives it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { serviceNodeFlags } from '../service-node-flags';

const ROOT = path.resolve(__dirname, '../..');

export interface Service {
  url: string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** The environment every process gets on top of its own: the database URLs of the run. */
let databaseEnv: Record<string, string> = {};
export function useDatabase(env: Record<string, string>): void {
  databaseEnv = env;
}

/** The last lines every service printed, shown when the run fails, so a failure explains itself. */
export const serviceOutput: string[] = [];
function keepOutput(name: string, stream: NodeJS.ReadableStream): void {
  let partial = '';
  stream.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) serviceOutput.push(`[${name}] ${line}`);
    serviceOutput.splice(0, Math.max(0, serviceOutput.length - 60));
  });
}
let servicesStarted = 0;

/** Every process still running. */
const children = new Set<ChildProcess>();
export function killAll(): void {
  for (const child of children) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/**
 * Starts one of the service's entry points as its own process group and waits for the log
 * line saying it is ready; the API and the delivery worker start the same way, with the same
 * environment, as production runs them.
 */
async function startProcess(kind: 'service' | 'worker', entry: string, env: Record<string, string>, readyMessage: string): Promise<{ ready: Record<string, unknown>; stop(signal?: NodeJS.Signals): Promise<void> }> {
  // One process, not tsx's launcher and a child: a signal reaches the service itself.
  const child = spawn(process.execPath, ['--import', 'tsx', ...serviceNodeFlags(ROOT), entry], {
    cwd: ROOT,
    env: { ...process.env, NODE_ENV: 'test', LOG_LEVEL: 'info', ...databaseEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(child);
  const name = `${kind} ${++servicesStarted} pid ${child.pid}`;
  keepOutput(name, child.stdout!);
  keepOutput(name, child.stderr!);
  let stopping = false;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    children.delete(child);
    if (!stopping) serviceOutput.push(`[${name}] exited unexpectedly (code ${code}, signal ${signal})`);
  });
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    let buffer = '';
    // A worker bundles the workflows at start: tens of seconds on a busy machine.
    const timer = setTimeout(() => reject(new Error(`the ${kind} did not start within 90 s`)), 90_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (const line of buffer.split('\n').slice(0, -1)) {
        if (line.includes(`"msg":"${readyMessage}"`)) {
          clearTimeout(timer);
          resolve(JSON.parse(line) as Record<string, unknown>);
        }
      }
      buffer = buffer.slice(buffer.lastIndexOf('\n') + 1);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the ${kind} exited with ${code} before it was ready`));
    });
  });
  return {
    ready,
    async stop(signal = 'SIGTERM') {
      stopping = true;
      try {
        process.kill(-child.pid!, signal);
      } catch {
        return;
      }
      await exited;
    },
  };
}

export async function startService(env: Record<string, string>): Promise<Service> {
  const { ready, stop } = await startProcess('service', 'src/server/main.ts', { PORT: '0', ...env }, 'listening');
  return { url: ready.url as string, stop };
}

/** `npm run worker`: runs the delivery workflows and activities of the task queue in `env`. */
export async function startWorker(env: Record<string, string>): Promise<Pick<Service, 'stop'>> {
  const { stop } = await startProcess('worker', 'src/delivery/worker-main.ts', { WORKER_METRICS_PORT: '0', ...env }, 'delivery worker running');
  return { stop };
}
