/**
 * What bench/temporal-cost.ts reads from delivery workflows' histories: the time of each
 * step of a delivery, and the state transitions it took; and the offered-load figures built
 * on them.
 */
import type { Client } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { processTreeCpuSeconds } from '../test/support/service-process';
import type { TemporalTarget, Topology } from './temporal-topology';

const E = temporal.api.enums.v1.EventType;

/** Medians over the samples, in ms. */
export interface Steps {
  /** Publish sent → its answer. */
  answered: number;
  /** Publish sent → WorkflowExecutionStarted. */
  started: number;
  /** WorkflowExecutionStarted → the first WorkflowTaskCompleted (schedule-to-start and the worker's activation). */
  workflowTask: number;
  /** ActivityTaskScheduled → ActivityTaskStarted. */
  activityTask: number;
  /** ActivityTaskStarted → the request's arrival at the receiver. */
  attempt: number;
  /** Arrival → ActivityTaskCompleted (the outcome recorded, the completion sent). */
  outcome: number;
  /** ActivityTaskCompleted → WorkflowExecutionCompleted (the last workflow task). */
  lastTask: number;
}

interface Timeline {
  started: number;
  firstTaskCompleted: number;
  activityScheduled: number;
  activityStarted: number;
  activityCompleted: number;
  completed: number;
  /** Mutable-state updates: one per request that changed the workflow (start, each task started or completed, a timer fired, a signal). */
  transitions: number;
}

/** Events each of which begins a transaction on the workflow's state (its own request to the history service). */
const TRANSITION_EVENTS = new Set<number>([
  E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
  E.EVENT_TYPE_WORKFLOW_TASK_STARTED,
  E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
  E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
  E.EVENT_TYPE_WORKFLOW_TASK_FAILED,
  E.EVENT_TYPE_ACTIVITY_TASK_STARTED,
  E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
  E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
  E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
  E.EVENT_TYPE_TIMER_FIRED,
  E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
]);

export async function timeline(client: Client, workflowId: string): Promise<Timeline> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const first = (type: number) => {
    const event = history.events?.find((e) => e.eventType === type);
    return event ? tsToMs(event.eventTime) : NaN;
  };
  return {
    started: first(E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
    firstTaskCompleted: first(E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
    activityScheduled: first(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
    activityStarted: first(E.EVENT_TYPE_ACTIVITY_TASK_STARTED),
    activityCompleted: first(E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED),
    completed: first(E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED),
    transitions: (history.events ?? []).filter((e) => TRANSITION_EVENTS.has(e.eventType ?? 0)).length,
  };
}

function percentile(values: number[], p: number): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

export async function historySteps(client: Client, samples: { workflowId: string; sentAt: number; answeredAt: number; arrivedAt: number }[]): Promise<Steps> {
  const each = await Promise.all(samples.map(async (s) => ({ s, t: await timeline(client, s.workflowId) })));
  const med = (f: (x: (typeof each)[number]) => number) => percentile(each.map(f), 50);
  return {
    answered: med(({ s }) => s.answeredAt - s.sentAt),
    started: med(({ s, t }) => t.started - s.sentAt),
    workflowTask: med(({ t }) => t.firstTaskCompleted - t.started),
    activityTask: med(({ t }) => t.activityStarted - t.activityScheduled),
    attempt: med(({ s, t }) => s.arrivedAt - t.activityStarted),
    outcome: med(({ s, t }) => t.activityCompleted - s.arrivedAt),
    lastTask: med(({ t }) => t.completed - t.activityCompleted),
  };
}

export interface RateFigures {
  /** Deliveries/s offered: events to 10 endpoints at a fixed pace. */
  offered: number;
  /** Deliveries / (last arrival − first publish). */
  deliveredPerSecond: number;
  /** State transitions per delivery (from the histories) × deliveries/s. */
  transitionsPerSecond: number;
  /** Publish sent → WorkflowExecutionStarted: the API's StartWorkflowExecution with its queue. */
  startP95Ms: number;
  scheduleToStartP95Ms: number;
  serverCpuMs: number;
  ourCpuMs: number;
}

const FAN = 10;
const HISTORIES = 200;

/** An offered load of `rate` deliveries/s for `seconds`, open loop (a publish does not wait for the one before). */
export async function rateFigures(
  top: Topology,
  client: Client,
  target: TemporalTarget,
  options: { rate: number; seconds: number; run: string; taskQueue: string; ourPids: number[] },
): Promise<RateFigures> {
  const eventType = `cost.rate${options.rate}.r${options.run}`;
  await top.subscribe(eventType, FAN);
  const events = Math.max(1, Math.round((options.rate / FAN) * options.seconds));
  const everyMs = (1000 * FAN) / options.rate;
  const cpu = () => ({ server: processTreeCpuSeconds(target.pid() ?? 0), ours: options.ourPids.reduce((sum, pid) => sum + processTreeCpuSeconds(pid), 0) });
  const c0 = cpu();
  const t0 = Date.now();
  const published: Promise<{ sentAt: number; ids: string[] }>[] = [];
  for (let i = 0; i < events; i++) {
    const wait = t0 + i * everyMs - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const sentAt = Date.now();
    published.push(top.publish(eventType, `${eventType}-${i}`).then((ids) => ({ sentAt, ids })));
  }
  const sent = await Promise.all(published);
  const total = events * FAN;
  const deadline = Date.now() + 600_000;
  const arrivals = () => top.receiver.requests.filter((r) => r.path.startsWith(`/${eventType}/`));
  while (arrivals().length < total) {
    if (Date.now() > deadline) throw new Error(`offered ${options.rate}/s: ${arrivals().length} of ${total} arrived`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const last = arrivals().reduce((max, r) => Math.max(max, r.receivedAt), 0);
  while ((await client.workflow.count(`TaskQueue = "${options.taskQueue}" AND ExecutionStatus = "Running"`)).count > 0) {
    if (Date.now() > deadline) throw new Error(`offered ${options.rate}/s: workflows still running`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const c1 = cpu();

  const sentAtOf = new Map<string, number>();
  for (const { sentAt, ids } of sent) for (const id of ids) sentAtOf.set(id, sentAt);
  const ids = [...sentAtOf.keys()].filter((_, i, all) => i % Math.max(1, Math.floor(all.length / HISTORIES)) === 0);
  const rows = await top.sql<{ id: string; workflow_id: string }>('select id, workflow_id from webhook_deliveries where id = any($1)', [ids]);
  const lines: (Timeline & { sentAt: number })[] = [];
  for (let i = 0; i < rows.length; i += 16) {
    lines.push(...(await Promise.all(rows.slice(i, i + 16).map(async (row) => ({ ...(await timeline(client, row.workflow_id)), sentAt: sentAtOf.get(row.id)! })))));
  }
  const deliveredPerSecond = total / ((last - t0) / 1000);
  const transitionsPerDelivery = lines.reduce((sum, l) => sum + l.transitions, 0) / Math.max(1, lines.length);
  return {
    offered: options.rate,
    deliveredPerSecond,
    transitionsPerSecond: deliveredPerSecond * transitionsPerDelivery,
    startP95Ms: percentile(lines.map((l) => l.started - l.sentAt), 95),
    scheduleToStartP95Ms: percentile(lines.map((l) => l.activityStarted - l.activityScheduled), 95),
    serverCpuMs: ((c1.server - c0.server) * 1000) / total,
    ourCpuMs: ((c1.ours - c0.ours) * 1000) / total,
  };
}
