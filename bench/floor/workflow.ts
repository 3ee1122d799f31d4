import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';

/** Temporal's least delivery: one workflow that runs one activity doing nothing (bench/temporal-floor.ts). */
const { noop } = proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds' });

export async function floor(): Promise<void> {
  await noop();
}

const local = proxyLocalActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds' });

/** The same with the activity run locally, inside the workflow task: one workflow task, no activity task. */
export async function floorLocal(): Promise<void> {
  await local.noop();
}

const { stamp } = proxyActivities<{ stamp(): Promise<number> }>({ startToCloseTimeout: '10 seconds' });

/** Temporal's latency floor: the wall-clock time (ms since the epoch) at which its one activity started. */
export async function floorTimed(): Promise<number> {
  return await stamp();
}
