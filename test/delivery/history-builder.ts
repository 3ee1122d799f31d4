import type { ActivityOptions } from '@temporalio/common';
import { msToNumber } from '@temporalio/common/lib/time';

/*
 * Workflow histories in the shape a 1.24 worker and the server record them, for replay tests
 * where no Temporal server can run. Each method appends what the server writes for one step,
 * in the order it writes it; the replayed workflow must issue the same commands or replay fails.
 *
 * What the builder copies from the SDK and the server, because replay depends on it:
 * - The first WorkflowTaskCompleted carries the core flags the worker used (sdkMetadata
 *   coreUsedFlags). A 1.24 worker writes [1, 2, 3]: 1 turns on the activity id and type checks,
 *   2 makes every new patched() call write an UpsertWorkflowSearchAttributes event
 *   (TemporalChangeVersion) right after its marker, and replay then expects that event.
 * - A patch marker is a MarkerRecorded named `core_patch` whose details hold `patch-data`:
 *   the JSON `{"id", "deprecated"}`.
 * - Activity and timer ids are the workflow's sequence numbers, counted from 1 per kind.
 * - An activity with a retry policy is retried by the server without any event: only its last
 *   execution is written, when it closes, as ActivityTaskStarted (with that execution's attempt
 *   number and the previous execution's failure) followed by the closing event.
 */

export type HistoryEvent = Record<string, any>;

/** What a 1.24 worker records in its first workflow task (see above). */
export const CORE_FLAGS_1_24 = [1, 2, 3];
/** The lang (TypeScript SDK) flags a 1.24 worker records on a workflow's first task. */
const LANG_FLAGS_1_24 = [1, 2];

const JSON_ENCODING = Buffer.from('json/plain').toString('base64');

/** A value as the default data converter encodes it (`undefined` becomes binary/null). */
export function payload(value: unknown): Record<string, any> {
  if (value === undefined) return { metadata: { encoding: Buffer.from('binary/null').toString('base64') } };
  return { metadata: { encoding: JSON_ENCODING }, data: Buffer.from(JSON.stringify(value)).toString('base64') };
}

function payloads(values: unknown[]): Record<string, any> {
  return values.length === 0 ? {} : { payloads: values.map(payload) };
}

/** A proto Duration in its JSON form ("30s"); absent durations are written as "0s". */
function duration(value: ActivityOptions['startToCloseTimeout']): string {
  return `${value === undefined ? 0 : msToNumber(value) / 1000}s`;
}

/** An ApplicationFailure as the TypeScript SDK serialises it into an activity's failure. */
export function applicationFailure(message: string, type: string, options: { nonRetryable?: boolean; details?: unknown[] } = {}) {
  return {
    message,
    source: 'TypeScriptSDK',
    stackTrace: '',
    applicationFailureInfo: {
      type,
      nonRetryable: options.nonRetryable ?? false,
      ...(options.details ? { details: payloads(options.details) } : {}),
    },
  };
}

/** The failure the server writes when an activity's heartbeats stopped (`activity %v timeout`). */
export function heartbeatTimeoutFailure() {
  return {
    message: 'activity Heartbeat timeout',
    source: 'Server',
    timeoutFailureInfo: { timeoutType: 'TIMEOUT_TYPE_HEARTBEAT' },
  };
}

export interface WorkflowStart {
  workflowId: string;
  workflowType: string;
  taskQueue: string;
  input: unknown[];
  memo?: Record<string, unknown>;
  runId: string;
  /** The run this one continued (continue-as-new), if any. */
  continuedFrom?: { runId: string; firstRunId: string };
  startTime: string;
  coreUsedFlags?: number[];
}

export interface ScheduledActivity {
  scheduledEventId: string;
  activityId: string;
  scheduledAt: number;
  retryIntervalMs: number;
}

export interface StartedTimer {
  timerId: string;
  startedEventId: string;
  firesAt: number;
}

/** Client identities and the worker's, as the fixtures name them. */
const WORKER_IDENTITY = 'replay-fixture@worker';
const CLIENT_IDENTITY = 'replay-fixture@client';

/**
 * Event times follow a fixed pace so histories read like a real run: a workflow task takes
 * 50 ms to be scheduled and completes at once; an activity starts 500 ms after it is scheduled
 * (plus its retry interval per earlier attempt) and closes 300 ms later.
 */
const WORKFLOW_TASK_DELAY_MS = 50;
const ACTIVITY_START_DELAY_MS = 500;
const ACTIVITY_RUN_MS = 300;

export class HistoryBuilder {
  private readonly events: HistoryEvent[] = [];
  private readonly taskQueue: { name: string; kind: string };
  private clock: number;
  private firstTask = true;
  private lastCompletedId = '0';
  private nextActivity = 1;
  private nextTimer = 1;
  private readonly patches = new Set<string>();

  constructor(private readonly start: WorkflowStart) {
    this.clock = Date.parse(start.startTime);
    this.taskQueue = { name: start.taskQueue, kind: 'TASK_QUEUE_KIND_NORMAL' };
    this.add('WORKFLOW_EXECUTION_STARTED', 'workflowExecutionStartedEventAttributes', {
      workflowType: { name: start.workflowType },
      taskQueue: this.taskQueue,
      input: payloads(start.input),
      workflowExecutionTimeout: '0s',
      workflowRunTimeout: '0s',
      workflowTaskTimeout: '10s',
      ...(start.continuedFrom
        ? { continuedExecutionRunId: start.continuedFrom.runId, initiator: 'CONTINUE_AS_NEW_INITIATOR_WORKFLOW' }
        : {}),
      originalExecutionRunId: start.runId,
      firstExecutionRunId: start.continuedFrom?.firstRunId ?? start.runId,
      identity: start.continuedFrom ? WORKER_IDENTITY : CLIENT_IDENTITY,
      attempt: 1,
      ...(start.memo
        ? { memo: { fields: Object.fromEntries(Object.entries(start.memo).map(([k, v]) => [k, payload(v)])) } }
        : {}),
      workflowId: start.workflowId,
    });
  }

  /** Lets time pass, e.g. before a signal arrives. */
  advance(ms: number): this {
    this.clock += ms;
    return this;
  }

  /** A workflow task scheduled, started and completed; the commands it issued follow it. */
  workflowTask(options: { suggestContinueAsNew?: boolean } = {}): this {
    this.clock += WORKFLOW_TASK_DELAY_MS;
    const scheduled = this.add('WORKFLOW_TASK_SCHEDULED', 'workflowTaskScheduledEventAttributes', {
      taskQueue: this.taskQueue,
      startToCloseTimeout: '10s',
      attempt: 1,
    });
    const started = this.add('WORKFLOW_TASK_STARTED', 'workflowTaskStartedEventAttributes', {
      scheduledEventId: scheduled,
      identity: WORKER_IDENTITY,
      requestId: `req-${scheduled}`,
      historySizeBytes: '0',
      ...(options.suggestContinueAsNew ? { suggestContinueAsNew: true } : {}),
    });
    this.lastCompletedId = this.add('WORKFLOW_TASK_COMPLETED', 'workflowTaskCompletedEventAttributes', {
      scheduledEventId: scheduled,
      startedEventId: started,
      identity: WORKER_IDENTITY,
      ...(this.firstTask
        ? {
            sdkMetadata: {
              coreUsedFlags: this.start.coreUsedFlags ?? CORE_FLAGS_1_24,
              langUsedFlags: LANG_FLAGS_1_24,
              sdkName: 'temporal-typescript',
              sdkVersion: '1.24.0',
            },
          }
        : {}),
    });
    this.firstTask = false;
    return this;
  }

  /** The first patched(id) call of a run, when not replaying: its marker, and the search attribute core adds. */
  patchMarker(patchId: string): this {
    this.add('MARKER_RECORDED', 'markerRecordedEventAttributes', {
      markerName: 'core_patch',
      details: { 'patch-data': payloads([{ id: patchId, deprecated: false }]) },
      workflowTaskCompletedEventId: this.lastCompletedId,
    });
    this.patches.add(patchId);
    if ((this.start.coreUsedFlags ?? CORE_FLAGS_1_24).includes(2)) {
      const versions = payload([...this.patches].sort());
      versions.metadata.type = Buffer.from('KeywordList').toString('base64');
      this.add('UPSERT_WORKFLOW_SEARCH_ATTRIBUTES', 'upsertWorkflowSearchAttributesEventAttributes', {
        workflowTaskCompletedEventId: this.lastCompletedId,
        searchAttributes: { indexedFields: { TemporalChangeVersion: versions } },
      });
    }
    return this;
  }

  /** A ScheduleActivityTask command recorded with the options the workflow passed. */
  scheduleActivity(activityType: string, input: unknown[], options: ActivityOptions): ScheduledActivity {
    const activityId = String(this.nextActivity++);
    const retry = options.retry ?? {};
    const scheduledEventId = this.add('ACTIVITY_TASK_SCHEDULED', 'activityTaskScheduledEventAttributes', {
      activityId,
      activityType: { name: activityType },
      taskQueue: this.taskQueue,
      input: payloads(input),
      scheduleToCloseTimeout: duration(options.scheduleToCloseTimeout),
      scheduleToStartTimeout: duration(options.scheduleToStartTimeout),
      startToCloseTimeout: duration(options.startToCloseTimeout),
      heartbeatTimeout: duration(options.heartbeatTimeout),
      workflowTaskCompletedEventId: this.lastCompletedId,
      retryPolicy: {
        initialInterval: duration(retry.initialInterval ?? '1s'),
        backoffCoefficient: retry.backoffCoefficient ?? 2,
        maximumInterval: duration(retry.maximumInterval ?? msToNumber(retry.initialInterval ?? '1s') * 100),
        ...(retry.maximumAttempts ? { maximumAttempts: retry.maximumAttempts } : {}),
        ...(retry.nonRetryableErrorTypes?.length ? { nonRetryableErrorTypes: retry.nonRetryableErrorTypes } : {}),
      },
    });
    return { scheduledEventId, activityId, scheduledAt: this.clock, retryIntervalMs: msToNumber(retry.initialInterval ?? '1s') };
  }

  /** The activity's last execution returned `result`. */
  activityCompleted(activity: ScheduledActivity, result: unknown, execution: ActivityExecution = {}): this {
    const started = this.activityStarted(activity, execution);
    this.add('ACTIVITY_TASK_COMPLETED', 'activityTaskCompletedEventAttributes', {
      result: payloads([result]),
      scheduledEventId: activity.scheduledEventId,
      startedEventId: started,
      identity: WORKER_IDENTITY,
    });
    return this;
  }

  /** The activity's last execution threw `failure` and the server will not retry it (retryState says why). */
  activityFailed(activity: ScheduledActivity, failure: object, retryState: string, execution: ActivityExecution = {}): this {
    const started = this.activityStarted(activity, execution);
    this.add('ACTIVITY_TASK_FAILED', 'activityTaskFailedEventAttributes', {
      failure,
      scheduledEventId: activity.scheduledEventId,
      startedEventId: started,
      identity: WORKER_IDENTITY,
      retryState,
    });
    return this;
  }

  /** The activity's last execution stopped heartbeating and the server gave up on it (retryState says why). */
  activityTimedOut(activity: ScheduledActivity, retryState: string, execution: ActivityExecution = {}): this {
    const started = this.activityStarted(activity, execution);
    this.add('ACTIVITY_TASK_TIMED_OUT', 'activityTaskTimedOutEventAttributes', {
      failure: heartbeatTimeoutFailure(),
      scheduledEventId: activity.scheduledEventId,
      startedEventId: started,
      retryState,
    });
    return this;
  }

  startTimer(ms: number): StartedTimer {
    const timerId = String(this.nextTimer++);
    const startedEventId = this.add('TIMER_STARTED', 'timerStartedEventAttributes', {
      timerId,
      startToFireTimeout: duration(ms),
      workflowTaskCompletedEventId: this.lastCompletedId,
    });
    return { timerId, startedEventId, firesAt: this.clock + ms };
  }

  timerFired(timer: StartedTimer): this {
    this.clock = timer.firesAt;
    this.add('TIMER_FIRED', 'timerFiredEventAttributes', { timerId: timer.timerId, startedEventId: timer.startedEventId });
    return this;
  }

  /** A CancelTimer command, issued by the workflow task just completed. */
  timerCanceled(timer: StartedTimer): this {
    this.add('TIMER_CANCELED', 'timerCanceledEventAttributes', {
      timerId: timer.timerId,
      startedEventId: timer.startedEventId,
      workflowTaskCompletedEventId: this.lastCompletedId,
      identity: WORKER_IDENTITY,
    });
    return this;
  }

  signaled(signalName: string, args: unknown[] = []): this {
    this.add('WORKFLOW_EXECUTION_SIGNALED', 'workflowExecutionSignaledEventAttributes', {
      signalName,
      input: payloads(args),
      identity: CLIENT_IDENTITY,
      header: {},
    });
    return this;
  }

  completed(result: unknown): this {
    this.add('WORKFLOW_EXECUTION_COMPLETED', 'workflowExecutionCompletedEventAttributes', {
      result: payloads([result]),
      workflowTaskCompletedEventId: this.lastCompletedId,
    });
    return this;
  }

  continuedAsNew(newRunId: string, input: unknown[]): this {
    this.add('WORKFLOW_EXECUTION_CONTINUED_AS_NEW', 'workflowExecutionContinuedAsNewEventAttributes', {
      newExecutionRunId: newRunId,
      workflowType: { name: this.start.workflowType },
      taskQueue: this.taskQueue,
      input: payloads(input),
      workflowRunTimeout: '0s',
      workflowTaskTimeout: '10s',
      workflowTaskCompletedEventId: this.lastCompletedId,
      initiator: 'CONTINUE_AS_NEW_INITIATOR_WORKFLOW',
    });
    return this;
  }

  /** The history in the JSON form `historyFromJSON` reads (and `temporal workflow show -o json` writes). */
  toJSON(): { events: HistoryEvent[] } {
    return { events: structuredClone(this.events) };
  }

  private activityStarted(activity: ScheduledActivity, { attempt = 1, lastFailure }: ActivityExecution): string {
    this.clock = Math.max(this.clock, activity.scheduledAt + (attempt - 1) * activity.retryIntervalMs + ACTIVITY_START_DELAY_MS);
    const started = this.add('ACTIVITY_TASK_STARTED', 'activityTaskStartedEventAttributes', {
      scheduledEventId: activity.scheduledEventId,
      identity: WORKER_IDENTITY,
      requestId: `act-${activity.scheduledEventId}`,
      attempt,
      ...(lastFailure ? { lastFailure } : {}),
    });
    this.clock += ACTIVITY_RUN_MS;
    return started;
  }

  private add(type: string, attributesKey: string, attributes: Record<string, unknown>): string {
    const eventId = String(this.events.length + 1);
    this.events.push({
      eventId,
      eventTime: new Date(this.clock).toISOString(),
      eventType: `EVENT_TYPE_${type}`,
      taskId: String(1048576 + this.events.length + 1),
      [attributesKey]: attributes,
    });
    return eventId;
  }
}

/** Which execution of an activity closed: its attempt number, and the failure of the one before. */
export interface ActivityExecution {
  attempt?: number;
  lastFailure?: object;
}
