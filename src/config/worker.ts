/**
 * `npm run worker`'s settings: how it stops, how much it runs at once, how it polls and
 * where its prebuilt workflow bundle is. Each bound is documented in the README ("The worker").
 */
export interface WorkerConfig {
  /**
   * On SIGTERM the worker stops polling and lets the attempts it has in flight finish for
   * this long before it cancels them; never shorter than the attempt deadline, so an attempt
   * whose receiver answers within its deadline is never cut by a deploy.
   */
  shutdownGraceMs: number;
  /** Attempt activities run at once: outbound requests in flight from this worker (and its PostgreSQL bookkeeping). */
  activitySlots: number;
  /** Workflow tasks run at once (CPU-bound, milliseconds each). */
  workflowTaskSlots: number;
  /** Poll requests open per task type: `autoscaling` lets the SDK scale them on the server's answers up to the maximum. */
  pollers: { behavior: 'autoscaling' | 'simple-maximum'; maxActivityPolls: number; maxWorkflowTaskPolls: number };
  /** Workflows kept in the sticky cache, so a workflow task does not replay the whole history; null: the SDK's, from the heap size. */
  maxCachedWorkflows: number | null;
  /** A workflow bundle built ahead of time (`npm run worker:bundle`); null: bundled at start, seconds of CPU. */
  workflowBundlePath: string | null;
}

/** Room after the outbound deadline for an attempt to record its outcome (a commit of the group of outcomes). */
const OUTCOME_RECORDING_ROOM_MS = 5_000;

type Int = (name: string, fallback: number, min: number, max: number) => number;

export function workerConfig(env: Record<string, string | undefined>, int: Int, problems: string[], attemptTimeoutMs: number): WorkerConfig {
  const behavior = env.WORKER_POLLER_BEHAVIOR || 'autoscaling';
  if (behavior !== 'autoscaling' && behavior !== 'simple-maximum') problems.push(`WORKER_POLLER_BEHAVIOR must be autoscaling or simple-maximum (got "${behavior}")`);
  const workflowTaskSlots = int('WORKER_WORKFLOW_TASK_SLOTS', 40, 2, 1000);
  const maxWorkflowTaskPolls = int('WORKER_MAX_WORKFLOW_TASK_POLLS', Math.min(10, workflowTaskSlots), 2, 1000);
  if (maxWorkflowTaskPolls > workflowTaskSlots) problems.push('WORKER_MAX_WORKFLOW_TASK_POLLS must not exceed WORKER_WORKFLOW_TASK_SLOTS');
  const activitySlots = int('WORKER_ACTIVITY_SLOTS', 100, 1, 10_000);
  return {
    shutdownGraceMs: int('WORKER_SHUTDOWN_GRACE_MS', attemptTimeoutMs + OUTCOME_RECORDING_ROOM_MS, attemptTimeoutMs, 10 * 60_000),
    activitySlots,
    workflowTaskSlots,
    pollers: {
      behavior: behavior === 'simple-maximum' ? 'simple-maximum' : 'autoscaling',
      maxActivityPolls: int('WORKER_MAX_ACTIVITY_POLLS', Math.min(10, activitySlots), 1, 1000),
      maxWorkflowTaskPolls,
    },
    maxCachedWorkflows: env.WORKER_MAX_CACHED_WORKFLOWS ? int('WORKER_MAX_CACHED_WORKFLOWS', 0, 0, 100_000) : null,
    workflowBundlePath: env.WORKER_WORKFLOW_BUNDLE || null,
  };
}
