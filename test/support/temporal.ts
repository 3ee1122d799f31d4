import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { bundleWorkflowCode, DefaultLogger, type WorkflowBundle } from '@temporalio/worker';
import { startTemporalDevServer, type DevServer } from '../../scripts/temporal-server';
import { workflowBundleDir } from './databases';

/**
 * The run's Temporal development server: global setup starts one (built from its pinned Go
 * module into .tools/ when missing) and every live suite uses it, each on a task queue of its
 * own. TEMPORAL_TEST_ADDRESS (and TEMPORAL_TEST_UI_URL) point the run at a server already
 * running instead. Never skipped: a suite that cannot reach the server fails.
 */
export const TEMPORAL_ADDRESS_ENV = 'TEMPORAL_TEST_ADDRESS';
export const TEMPORAL_UI_ENV = 'TEMPORAL_TEST_UI_URL';

const SERVER_KEY = Symbol.for('publishing.test.temporal');
type WithServer = typeof globalThis & { [SERVER_KEY]?: DevServer };

export async function startTestTemporal(): Promise<void> {
  if (process.env[TEMPORAL_ADDRESS_ENV]) return;
  const server = await startTemporalDevServer({ logFile: path.join(os.tmpdir(), `publishing-test-temporal-${process.pid}.log`) });
  (globalThis as WithServer)[SERVER_KEY] = server;
  process.env[TEMPORAL_ADDRESS_ENV] = server.address;
  if (server.uiUrl) process.env[TEMPORAL_UI_ENV] = server.uiUrl;
}

export async function stopTestTemporal(): Promise<void> {
  const server = (globalThis as WithServer)[SERVER_KEY];
  delete (globalThis as WithServer)[SERVER_KEY];
  await server?.stop();
}

/** The run's server address; fails (never skips) when there is none. */
export function testTemporalAddress(): string {
  const address = process.env[TEMPORAL_ADDRESS_ENV];
  if (!address) throw new Error(`${TEMPORAL_ADDRESS_ENV} is not set: run the suites through jest, whose global setup starts Temporal`);
  return address;
}

export function testTemporalUiUrl(): string {
  const url = process.env[TEMPORAL_UI_ENV];
  if (!url) throw new Error(`${TEMPORAL_UI_ENV} is not set: the run's Temporal server has no UI`);
  return url;
}

const PRODUCTION_BUNDLE = 'production.js';

/**
 * Bundles the production workflow code once per run, in global setup, before the suites
 * start: bundling takes seconds alone and far longer when every live suite does it at once
 * on a busy machine. The code cannot change under a run.
 */
export async function bundleProductionWorkflows(): Promise<void> {
  const built = await bundleWorkflowCode({ workflowsPath: require.resolve('../../workflows'), logger: new DefaultLogger('ERROR') });
  const file = path.join(workflowBundleDir(), PRODUCTION_BUNDLE);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.${process.pid}`, built.code);
  await rename(`${file}.${process.pid}`, file);
}

/** The production workflow bundle global setup wrote for this run. */
export async function productionWorkflowBundle(): Promise<WorkflowBundle> {
  return { code: await readFile(productionWorkflowBundlePath(), 'utf8') };
}

/** Where that bundle is, for a worker process (WORKER_WORKFLOW_BUNDLE). */
export function productionWorkflowBundlePath(): string {
  return path.join(workflowBundleDir(), PRODUCTION_BUNDLE);
}

/** The pid of the run's development server (for CPU figures), or null when the run uses a server of its own. */
export function testTemporalServerPid(): number | null {
  return (globalThis as WithServer)[SERVER_KEY]?.pid ?? null;
}
