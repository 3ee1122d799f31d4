import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import {
  bundleWorkflowCode,
  DefaultLogger,
  makeTelemetryFilterString,
  Runtime,
  Worker,
  type InjectedSinks,
  type WorkflowBundle,
} from '@temporalio/worker';
import type { DeliveryRef } from '../../src/delivery/contract';
import { workflowIdFor } from '../../src/delivery/workflow-id';
import { ATTEMPT_ACTIVITY_OPTIONS, DEAD_LETTER_ACTIVITY_OPTIONS } from '../../workflows/delivery';
import type { CommandSinks } from './fixtures/command-recorder';
import { HistoryBuilder, type WorkflowStart } from './history-builder';
import { workflowBundleDir } from '../support/databases';

/** The delivery every replay history is about. */
export const ref: DeliveryRef = { deliveryId: 'dlv_01', organizationId: 'org_01', endpointId: 'end_01', eventId: 'evt_01' };

/** What the API puts in a delivery workflow's memo (TemporalDeliveryEngine.start). */
const memo = { organizationId: 'org_01', endpointId: 'end_01', eventId: 'evt_01', eventType: 'post.published', targetHost: 'hooks.example.com' };

/** A deliverWebhook run as the API starts it; a continued run names the run it continues. */
export function deliveryHistory(start: Partial<Pick<WorkflowStart, 'input' | 'runId' | 'continuedFrom' | 'coreUsedFlags' | 'startTime'>> = {}) {
  return new HistoryBuilder({
    workflowId: workflowIdFor(ref),
    workflowType: 'deliverWebhook',
    taskQueue: 'webhook-delivery',
    input: [ref],
    memo,
    runId: 'run-0001',
    startTime: '2026-01-05T10:00:00.000Z',
    ...start,
  });
}

/** The attempt activity's options as the workflow passes them with `remaining` sends left. */
export function attemptOptions(remaining: number) {
  return { ...ATTEMPT_ACTIVITY_OPTIONS, retry: { ...ATTEMPT_ACTIVITY_OPTIONS.retry, maximumAttempts: remaining } };
}

export const deadLetterOptions = DEAD_LETTER_ACTIVITY_OPTIONS;

export interface RecordedCommands {
  /** maximumAttempts of each ScheduleActivityTask command, by activity type, in order. */
  activities: Array<{ activityType: string; maximumAttempts: number | undefined }>;
  continuedAsNew: unknown[][];
}

const bundles = new Map<string, Promise<WorkflowBundle>>();

/**
 * One bundle per workflow module and run: bundling takes seconds, replaying milliseconds.
 * The suites of one run share it through a directory named after the run's template
 * database (the workflow code cannot change under a run); global teardown removes it.
 */
function bundleFor(workflowsPath: string): Promise<WorkflowBundle> {
  let bundle = bundles.get(workflowsPath);
  if (!bundle) {
    bundle = sharedBundle(workflowsPath);
    bundles.set(workflowsPath, bundle);
  }
  return bundle;
}

async function sharedBundle(workflowsPath: string): Promise<WorkflowBundle> {
  const file = path.join(workflowBundleDir(), `${createHash('sha256').update(workflowsPath).digest('hex').slice(0, 16)}.js`);
  try {
    return { code: await readFile(file, 'utf8') };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const built = await bundleWorkflowCode({
    workflowsPath,
    workflowInterceptorModules: [require.resolve('./fixtures/command-recorder')],
    logger: new DefaultLogger('ERROR'),
  });
  // Written aside and renamed: a suite reading it meanwhile sees all of it or none.
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.${process.pid}`, built.code);
  await rename(`${file}.${process.pid}`, file);
  return built;
}

/** Replays a history against a workflow module (the production one by default) and returns the commands it issued. */
export async function replay(
  history: { events: unknown[] },
  workflowsPath: string = require.resolve('../../workflows'),
): Promise<RecordedCommands> {
  const recorded: RecordedCommands = { activities: [], continuedAsNew: [] };
  const sinks: InjectedSinks<CommandSinks> = {
    commands: {
      activityScheduled: {
        fn: (_info, activityType, maximumAttempts) => void recorded.activities.push({ activityType, maximumAttempts }),
        callDuringReplay: true,
      },
      continuedAsNew: { fn: (_info, args) => void recorded.continuedAsNew.push(args), callDuringReplay: true },
    },
  };
  await Worker.runReplayHistory({ workflowBundle: await bundleFor(workflowsPath), sinks }, historyFromJSON(history), workflowIdFor(ref));
  return recorded;
}

/** The negative cases make the worker log the violation they assert; keep passing runs quiet. */
export function quietWorkerLogs(): void {
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } },
  });
}
