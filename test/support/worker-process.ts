import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { productionWorkflowBundlePath } from './temporal';

const ROOT = path.resolve(__dirname, '..', '..');
/** Characters of the worker's output kept for a failure's message. */
const OUTPUT_KEPT = 64_000;

export interface WorkerProcess {
  child: ChildProcess;
  /** The worker's /metrics, as its start line logged it. */
  metricsUrl: string;
  /** The last of what it wrote to stdout and stderr. */
  output(): string;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /** SIGTERM (a deploy), then waits for the exit. */
  stop(): Promise<number | null>;
}

/**
 * `npm run worker` as production runs it: its own process, the production workflow bundle
 * global setup prebuilt (WORKER_WORKFLOW_BUNDLE), its own /metrics. Resolves once it logged
 * that it runs.
 */
export async function startWorkerProcess(env: Record<string, string>): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/delivery/worker-main.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      NODE_ENV: 'test',
      LOG_LEVEL: 'info',
      HOST: '127.0.0.1',
      WORKER_METRICS_PORT: '0',
      DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
      WORKER_WORKFLOW_BUNDLE: productionWorkflowBundlePath(),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let buffer = '';
  let running = false;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const metricsUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the worker did not start within 90 s: ${buffer.slice(-2000)}`)), 90_000);
    // Its output is read as it comes (a pipe left full would block the worker's writes) and
    // only the tail kept: a worker logging every attempt writes megabytes in a long suite.
    const read = (chunk: Buffer) => {
      buffer = (buffer + chunk.toString()).slice(-OUTPUT_KEPT);
      if (running) return;
      const line = buffer.split('\n').find((l) => l.includes('"msg":"delivery worker running"'));
      if (line) {
        running = true;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { metrics: string }).metrics);
      }
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the worker exited (${code}) before it ran: ${buffer.slice(-2000)}`));
    });
  }).catch((error: unknown) => {
    child.kill('SIGKILL');
    throw error;
  });
  return {
    child,
    metricsUrl,
    output: () => buffer,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
