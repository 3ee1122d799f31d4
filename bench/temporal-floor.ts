/**
 * `scripts/with-node.sh tsx bench/temporal-floor.ts`: Temporal's own floor for what a delivery
 * is made of, on this machine and SDK: a workflow that runs one activity doing nothing
 * (bench/floor/workflow.ts: two workflow tasks and one activity task, as a delivery), its
 * worker in a process of its own with the service's Node flags, started by a client in
 * another, on the development server. Per run: the worker's CPU per workflow and the
 * client's per start (on @grpc/grpc-js, as the API's, and on the SDK's Rust connection), for a burst of 400 started 16 at a time (as the API starts them),
 * what the worker uses idle, and the worker's CPU when the activity runs as a local activity
 * (bench/floor/workflow.ts `floorLocal`: one workflow task, no activity task). Then the latency
 * floor: LATENCY_SAMPLES workflows started one at a time (`floorTimed`), each timed from the
 * start's call to its activity's start, on the project's server settings (the SQLite file
 * journalled ahead) and, on a second server, on the CLI's own (a rollback journal).
 * BENCH_TEMPORAL_PAIRS runs (default 5); medians.
 * Beside bench/temporal-cost.ts it says how much of a delivery's cost is the SDK's.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { serviceNodeFlags } from '../scripts/service-node-flags';
import { DEV_SERVER_SQLITE_PRAGMAS, startTemporalDevServer } from '../scripts/temporal-server';
import { processTreeCpuSeconds } from '../test/support/service-process';

const ROOT = path.resolve(__dirname, '..');
const RUNS = Number(process.env.BENCH_TEMPORAL_PAIRS ?? 5);
const BURST = 400;
const LATENCY_SAMPLES = 30;
const CONCURRENCY = 16;

function child(args: string[]): { process: ChildProcess; output: Promise<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', ...serviceNodeFlags(ROOT), __filename, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return { process: proc, output: new Promise((resolve, reject) => proc.once('exit', (code) => (code === 0 || code === null ? resolve(out) : reject(new Error(`${args[0]} exited ${code}`))))) };
}

async function worker(address: string, taskQueue: string, bundle: string): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const connection = await NativeConnection.connect({ address });
  const cached = process.env.BENCH_FLOOR_MAX_CACHED_WORKFLOWS;
  const running = await Worker.create({ connection, taskQueue, workflowBundle: { codePath: bundle }, activities: { async noop() {}, async stamp() { return Date.now(); } }, ...(cached && { maxCachedWorkflows: Number(cached) }) });
  process.once('SIGTERM', () => running.shutdown());
  process.stdout.write('ready\n');
  await running.run();
  await connection.close();
}

/** `native`: the client on the SDK's Rust connection (NativeConnection) instead of @grpc/grpc-js. */
async function starter(address: string, taskQueue: string, native: boolean, workflowType: string): Promise<void> {
  if (native) Runtime.install({ logger: new DefaultLogger('ERROR') });
  const client = new Client({ connection: native ? await NativeConnection.connect({ address }) : await Connection.connect({ address }) });
  // One start first, outside the count: the channel's and the JIT's warm-up.
  await client.workflow.start('floor', { taskQueue, workflowId: `warm-${randomUUID()}` });
  // The parent counts the worker's CPU from here on.
  process.stdout.write('warm\n');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const before = process.cpuUsage();
  let next = 0;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < BURST) {
      next++;
      await client.workflow.start(workflowType, { taskQueue, workflowId: `floor-${randomUUID()}` });
    }
  }));
  const used = process.cpuUsage(before);
  process.stdout.write(`${JSON.stringify({ clientCpuMsPerStart: (used.user + used.system) / 1000 / BURST })}\n`);
  await client.connection.close();
}

/** CPU per start of a client process, for a burst of BURST starts; the workflows are left to the worker. */
async function clientCpuPerStart(address: string, taskQueue: string, native: boolean, onWarm: () => void, workflowType = 'floor'): Promise<number> {
  const starting = child(['starter', address, taskQueue, native ? 'native' : 'grpc-js', workflowType]);
  await new Promise<void>((resolve) => starting.process.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('warm') && resolve()));
  onWarm();
  return (JSON.parse((await starting.output).trim().split('\n').at(-1)!) as { clientCpuMsPerStart: number }).clientCpuMsPerStart;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const percentile = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;

/**
 * Start → activity started (ms), LATENCY_SAMPLES workflows one at a time, 100 ms apart, after
 * five not counted: Temporal's latency floor for a delivery's first attempt on this server.
 */
async function latencyFloor(address: string, taskQueue: string): Promise<{ p50: number; p90: number }> {
  const client = new Client({ connection: await Connection.connect({ address }) });
  const samples: number[] = [];
  try {
    for (let i = 0; i < LATENCY_SAMPLES + 5; i++) {
      const sent = Date.now();
      const handle = await client.workflow.start('floorTimed', { taskQueue, workflowId: `timed-${randomUUID()}` });
      const started = (await handle.result()) as number;
      if (i >= 5) samples.push(started - sent);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await client.connection.close();
  }
  return { p50: percentile(samples, 0.5), p90: percentile(samples, 0.9) };
}

/** The latency floor on a server of its own with the given SQLite pragmas, a worker of its own. */
async function latencyFloorOn(dir: string, bundle: string, sqlitePragmas: readonly string[]): Promise<{ p50: number; p90: number }> {
  const other = await startTemporalDevServer({ uiPort: false, dbFile: path.join(dir, `temporal-${randomUUID().slice(0, 8)}.db`), sqlitePragmas });
  const taskQueue = `timed-${randomUUID().slice(0, 8)}`;
  const w = child(['worker', other.address, taskQueue, bundle]);
  try {
    await new Promise<void>((resolve) => w.process.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve()));
    return await latencyFloor(other.address, taskQueue);
  } finally {
    w.process.kill('SIGTERM');
    await w.output;
    await other.stop();
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-temporal-floor-'));
  const server = await startTemporalDevServer({ uiPort: false, dbFile: path.join(dir, 'temporal.db') });
  const client = new Client({ connection: await Connection.connect({ address: server.address }) });
  const bundle = path.join(dir, 'floor.js');
  writeFileSync(bundle, (await bundleWorkflowCode({ workflowsPath: require.resolve('./floor/workflow'), logger: new DefaultLogger('ERROR') })).code);
  const runs: {
    workerCpuMs: number;
    localWorkerCpuMs: number;
    clientCpuMs: number;
    nativeClientCpuMs: number;
    serverCpuMs: number;
    idleWorkerMsPerSecond: number;
    latencyP50Ms: number;
    latencyP90Ms: number;
    rollbackLatencyP50Ms: number;
    rollbackLatencyP90Ms: number;
  }[] = [];
  try {
    for (let i = 0; i < RUNS; i++) {
      const taskQueue = `floor-${randomUUID().slice(0, 8)}`;
      const w = child(['worker', server.address, taskQueue, bundle]);
      await new Promise<void>((resolve) => w.process.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve()));
      const open = async () => (await client.workflow.count(`TaskQueue = "${taskQueue}" AND ExecutionStatus = "Running"`)).count;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const i0 = processTreeCpuSeconds(w.process.pid!);
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      const i1 = processTreeCpuSeconds(w.process.pid!);
      let s0 = 0;
      let c0 = 0;
      const clientCpuMs = await clientCpuPerStart(server.address, taskQueue, false, () => {
        s0 = processTreeCpuSeconds(server.pid);
        c0 = processTreeCpuSeconds(w.process.pid!);
      });
      while ((await open()) > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      const c1 = processTreeCpuSeconds(w.process.pid!);
      const s1 = processTreeCpuSeconds(server.pid);
      // The same burst from a client on the Rust connection (the worker's CPU is not counted for it).
      const nativeClientCpuMs = await clientCpuPerStart(server.address, taskQueue, true, () => undefined);
      while ((await open()) > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      // The same burst of the local-activity workflow: the worker's CPU per workflow.
      let l0 = 0;
      await clientCpuPerStart(server.address, taskQueue, false, () => (l0 = processTreeCpuSeconds(w.process.pid!)), 'floorLocal');
      while ((await open()) > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      const localWorkerCpuMs = ((processTreeCpuSeconds(w.process.pid!) - l0) * 1000) / (BURST + 1);
      w.process.kill('SIGTERM');
      await w.output;
      // The latency floor on two fresh servers, back to back, the order alternating from run to run.
      const first = await latencyFloorOn(dir, bundle, i % 2 === 0 ? DEV_SERVER_SQLITE_PRAGMAS : []);
      const second = await latencyFloorOn(dir, bundle, i % 2 === 0 ? [] : DEV_SERVER_SQLITE_PRAGMAS);
      const [journalled, rollback] = i % 2 === 0 ? [first, second] : [second, first];
      runs.push({
        workerCpuMs: ((c1 - c0) * 1000) / (BURST + 1),
        localWorkerCpuMs,
        clientCpuMs,
        nativeClientCpuMs,
        serverCpuMs: ((s1 - s0) * 1000) / (BURST + 1),
        idleWorkerMsPerSecond: ((i1 - i0) * 1000) / 5,
        latencyP50Ms: journalled.p50,
        latencyP90Ms: journalled.p90,
        rollbackLatencyP50Ms: rollback.p50,
        rollbackLatencyP90Ms: rollback.p90,
      });
      process.stderr.write(`floor run ${i + 1}: ${JSON.stringify(runs.at(-1))}, load ${os.loadavg()[0]!.toFixed(2)}\n`);
    }
  } finally {
    await client.connection.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const row = (name: string, pick: (r: (typeof runs)[number]) => number) => `| ${name} | ${median(runs.map(pick)).toFixed(2)} | ${Math.min(...runs.map(pick)).toFixed(2)} – ${Math.max(...runs.map(pick)).toFixed(2)} |`;
  process.stdout.write(
    [
      `\nTemporal's floor (a workflow with one no-op activity), ${runs.length} runs:`,
      '| Figure | median | min – max |',
      '|---|---|---|',
      row('worker CPU per workflow (ms)', (r) => r.workerCpuMs),
      row('worker CPU per workflow, the activity local (ms)', (r) => r.localWorkerCpuMs),
      row('client CPU per start, @grpc/grpc-js Connection (ms)', (r) => r.clientCpuMs),
      row('client CPU per start, NativeConnection (ms)', (r) => r.nativeClientCpuMs),
      row('dev server CPU per workflow (ms)', (r) => r.serverCpuMs),
      row('worker idle CPU (ms/s)', (r) => r.idleWorkerMsPerSecond),
      row('start → activity started, one at a time, p50 (ms)', (r) => r.latencyP50Ms),
      row('start → activity started, one at a time, p90 (ms)', (r) => r.latencyP90Ms),
      row('the same on a rollback journal (the CLI\'s own SQLite settings), p50 (ms)', (r) => r.rollbackLatencyP50Ms),
      row('the same on a rollback journal, p90 (ms)', (r) => r.rollbackLatencyP90Ms),
      `\nload average ${os.loadavg()[0]!.toFixed(2)}\n`,
    ].join('\n'),
  );
}

const [role, address, taskQueue, extra, workflowType] = process.argv.slice(2);
const run = role === 'worker' ? worker(address!, taskQueue!, extra!) : role === 'starter' ? starter(address!, taskQueue!, extra === 'native', workflowType ?? 'floor') : main();
run.catch((error: unknown) => {
  process.stderr.write(`bench:temporal-floor: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
