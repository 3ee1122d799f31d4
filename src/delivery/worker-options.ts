import { readFile } from 'node:fs/promises';
import type { WorkerOptions } from '@temporalio/worker';
import type { WorkerConfig } from '../config';

/** After the grace, cancelled attempts get this long to record that they stopped before the worker gives up on them. */
const FORCE_AFTER_GRACE_MS = 10_000;

/**
 * The worker's options from configuration (README, "The worker"): slots, pollers, sticky
 * cache, the shutdown grace and the workflow code.
 *
 * The grace is what makes a deploy cost nothing: the SDK's default (0) cancels every
 * activity the moment SIGTERM arrives, which aborts requests the receiver is about to
 * answer, so the event is sent again and the broken request is recorded against the
 * customer's endpoint. With a grace at least the attempt deadline, the worker stops polling
 * and the attempts in flight end as they would have (delivered, or failed on the receiver's
 * side) before it exits.
 */
export async function workerOptionsFrom(config: WorkerConfig): Promise<Partial<WorkerOptions>> {
  const poller = (maximum: number) => (config.pollers.behavior === 'autoscaling' ? { type: 'autoscaling' as const, maximum } : { type: 'simple-maximum' as const, maximum });
  return {
    shutdownGraceTime: config.shutdownGraceMs,
    shutdownForceTime: config.shutdownGraceMs + FORCE_AFTER_GRACE_MS,
    maxConcurrentActivityTaskExecutions: config.activitySlots,
    maxConcurrentWorkflowTaskExecutions: config.workflowTaskSlots,
    activityTaskPollerBehavior: poller(config.pollers.maxActivityPolls),
    workflowTaskPollerBehavior: poller(config.pollers.maxWorkflowTaskPolls),
    ...(config.maxCachedWorkflows !== null && { maxCachedWorkflows: config.maxCachedWorkflows }),
    ...(config.workflowBundlePath
      ? { workflowBundle: { code: await readFile(config.workflowBundlePath, 'utf8') } }
      : { workflowsPath: require.resolve('../../workflows') }),
  };
}
