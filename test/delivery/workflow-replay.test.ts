import { readFileSync } from 'node:fs';
import path from 'node:path';
import {
  Client,
  decodeWorkflowIdConflictPolicy,
  decodeWorkflowIdReusePolicy,
  WorkflowExecutionAlreadyStartedError,
  type ConnectionLike,
  type StartWorkflowExecutionRequest,
} from '@temporalio/client';
import { DeterminismViolationError } from '@temporalio/workflow';
import { Worker } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { FAILURE_TYPES, type DeliveryRef } from '../../src/delivery/contract';
import { TemporalDeliveryEngine } from '../../src/delivery/temporal-engine';
import { workflowIdFor } from '../../src/delivery/workflow-id';
import { ATTEMPT_ACTIVITY_OPTIONS, PATCHES } from '../../workflows/delivery';
import { ACTIVITY_START_TO_CLOSE_MS, DELIVERY_RETRY_POLICY, RELEASE_SIGNAL } from '../../workflows/policy';
import { attemptOptions, deadLetterOptions, deliveryHistory, quietWorkerLogs, ref, replay } from './delivery-histories';
import { applicationFailure, heartbeatTimeoutFailure } from './history-builder';
import { recordedHistories } from './recorded-histories';
import { productionWorkflowBundle } from '../support/temporal';

/*
 * No Temporal server can run here, so the histories under ./histories were written by hand in
 * the shape a 1.24 worker records, before the workflow's patches existed; the newer ones are
 * built with ./history-builder. The first WorkflowTaskCompleted carries sdkMetadata
 * coreUsedFlags [1] as a real worker does: without it, replay skips the activity id/type checks
 * to stay compatible with histories from old SDKs, and a wrong activity would replay cleanly.
 */
type HistoryJSON = { events: Array<Record<string, any>> };

function loadHistory(name: string): HistoryJSON {
  return JSON.parse(readFileSync(path.join(__dirname, 'histories', name), 'utf8')) as HistoryJSON;
}

function firstEvent(history: HistoryJSON, eventType: string): Record<string, any> {
  const event = history.events.find((e) => e.eventType === eventType);
  if (!event) throw new Error(`history has no ${eventType}`);
  return event;
}

beforeAll(quietWorkerLogs);

describe('deliverWebhook', () => {
  it.each([
    ['success.json', 'returns delivered after one attempt'],
    ['exhausted-dead-letter.json', 'dead-letters once all 8 attempts failed'],
    ['endpoint-gone.json', 'fails without a dead letter when the endpoint is gone'],
    ['kill-switch-held-then-sent.json', 'waits one interval while the kill switch holds it, then delivers'],
    ['kill-switch-held-continued-as-new.json', 'continues as new while held once Temporal suggests it'],
  ])('%s: %s', async (file) => {
    await expect(replay(loadHistory(file))).resolves.toBeDefined();
  });

  it('fails replay when the history scheduled a different activity than the workflow does', async () => {
    const history = loadHistory('success.json');
    firstEvent(history, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED').activityTaskScheduledEventAttributes.activityType.name =
      'deadLetter';

    await expect(replay(history)).rejects.toBeInstanceOf(DeterminismViolationError);
  });

  it('fails replay when a retryable failure is followed by completion instead of a dead letter', async () => {
    const history = loadHistory('endpoint-gone.json');
    firstEvent(history, 'EVENT_TYPE_ACTIVITY_TASK_FAILED').activityTaskFailedEventAttributes.failure.applicationFailureInfo.type =
      FAILURE_TYPES.attemptFailed;

    await expect(replay(history)).rejects.toBeInstanceOf(DeterminismViolationError);
  });

  it('retries attempts a fixed 30 s apart, at most 8 times', () => {
    expect(ATTEMPT_ACTIVITY_OPTIONS.retry).toMatchObject(DELIVERY_RETRY_POLICY);
    expect(ATTEMPT_ACTIVITY_OPTIONS.retry).toMatchObject({
      initialInterval: 30_000,
      maximumInterval: 30_000,
      backoffCoefficient: 1,
      maximumAttempts: 8,
    });
    expect(ATTEMPT_ACTIVITY_OPTIONS.startToCloseTimeout).toBe(ACTIVITY_START_TO_CLOSE_MS);
  });

  it('does not retry a gone endpoint or a delivery that already used its attempts', () => {
    expect(ATTEMPT_ACTIVITY_OPTIONS.retry.nonRetryableErrorTypes).toEqual([
      FAILURE_TYPES.endpointGone,
      FAILURE_TYPES.attemptsExhausted,
    ]);
  });
});

/*
 * Histories as the current workflow records them: both patches on, the attempt activity
 * heartbeating. Each ends in what the delivery came to, so a workflow that took another path
 * (another command, or none) fails its replay.
 */
describe('deliverWebhook with its patches', () => {
  const attempt = 'attemptDelivery';
  const delivered = (attemptNumber: number) => ({ kind: 'delivered', attempt: attemptNumber, status: 200 });
  const sendFailed = (sent: number) => applicationFailure('The endpoint answered HTTP 503.', FAILURE_TYPES.attemptFailed, { details: [{ sent }] });
  const exhausted = applicationFailure('The endpoint answered HTTP 503.', FAILURE_TYPES.attemptsExhausted, { nonRetryable: true, details: [{ sent: 8 }] });

  /** Retries ran out after 8 executions, of which only 6 sent: two died before sending. */
  function retriesRanOutWithTwoUnsent() {
    const history = deliveryHistory().workflowTask();
    const first = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history
      .activityFailed(first, sendFailed(6), 'RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED', { attempt: 8, lastFailure: sendFailed(5) })
      .workflowTask()
      .patchMarker(PATCHES.topUpUnsentAttempts);
    history.timerFired(history.startTimer(30_000)).workflowTask();
    return { history, topUp: history.scheduleActivity(attempt, [ref], attemptOptions(2)) };
  }

  /** Held by a kill switch after 3 sends, then one interval passed while Temporal suggested continuing as new. */
  function heldAfterThreeSends() {
    const history = deliveryHistory().workflowTask();
    const first = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(first, { kind: 'held', sent: 3 }, { attempt: 4, lastFailure: sendFailed(3) }).workflowTask().patchMarker(PATCHES.releaseSignal);
    history.timerFired(history.startTimer(30_000)).workflowTask({ suggestContinueAsNew: true });
    return history;
  }

  it("waits for its endpoint's turn without counting an attempt, then sends with the whole budget", async () => {
    const history = deliveryHistory().workflowTask();
    const waiting = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(waiting, { kind: 'turn', sent: 0, waitMs: 1_000 }).workflowTask().patchMarker(PATCHES.endpointTurn);
    history.timerFired(history.startTimer(1_000)).workflowTask();
    const sent = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(sent, delivered(1)).workflowTask().completed({ status: 'delivered', attempts: 1 });

    await expect(replay(history.toJSON())).resolves.toBeDefined();
  });

  it("asks again as soon as the attempt that freed its endpoint's turn wakes it, cancelling its fallback wait", async () => {
    const history = deliveryHistory().workflowTask();
    const waiting = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(waiting, { kind: 'turn', sent: 0, waitMs: 60_000 }).workflowTask().patchMarker(PATCHES.endpointTurn).patchMarker(PATCHES.turnWake);
    const fallback = history.startTimer(60_000);
    history.advance(9_000).signaled(RELEASE_SIGNAL).workflowTask().timerCanceled(fallback);
    const sent = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(sent, delivered(1)).workflowTask().completed({ status: 'delivered', attempts: 1 });

    await expect(replay(history.toJSON())).resolves.toBeDefined();
  });

  it('does not wait out the interval when the release signal arrived while the held attempt was returning', async () => {
    const history = deliveryHistory().workflowTask();
    const held = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    // The kill switch went off after the attempt marked the row held, before its result reached the workflow.
    history.advance(200).signaled(RELEASE_SIGNAL).workflowTask();
    history.activityCompleted(held, { kind: 'held', sent: 0 }).workflowTask().patchMarker(PATCHES.releaseSignal);
    const released = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityCompleted(released, delivered(1)).workflowTask().completed({ status: 'delivered', attempts: 1 });

    await expect(replay(history.toJSON())).resolves.toBeDefined();
  });

  it('tops up the attempts left unsent when retries ran out, then dead-letters once 8 were sent', async () => {
    const { history, topUp } = retriesRanOutWithTwoUnsent();
    history.activityFailed(topUp, exhausted, 'RETRY_STATE_NON_RETRYABLE_FAILURE', { attempt: 2, lastFailure: sendFailed(7) }).workflowTask();
    const deadLetter = history.scheduleActivity('deadLetter', [ref], deadLetterOptions);
    history.activityCompleted(deadLetter, undefined).workflowTask().completed({ status: 'dead_lettered' });

    const commands = await replay(history.toJSON());

    expect(commands.activities.map((a) => a.activityType)).toEqual([attempt, attempt, 'deadLetter']);
  });

  it('tops up the attempts left unsent when retries ran out, and delivers on one of them', async () => {
    const { history, topUp } = retriesRanOutWithTwoUnsent();
    history.activityCompleted(topUp, delivered(7)).workflowTask().completed({ status: 'delivered', attempts: 7 });

    await expect(replay(history.toJSON())).resolves.toBeDefined();
  });

  it('gives the attempt activity a retry budget of the sends left: 8 − sent', async () => {
    const { history, topUp } = retriesRanOutWithTwoUnsent();
    history.activityCompleted(topUp, delivered(7)).workflowTask().completed({ status: 'delivered', attempts: 7 });
    const continued = deliveryHistory({ input: [ref, { sent: 3 }], runId: 'run-0002', continuedFrom: { runId: 'run-0001', firstRunId: 'run-0001' } }).workflowTask();
    const after3 = continued.scheduleActivity(attempt, [ref], attemptOptions(5));
    continued.activityCompleted(after3, delivered(4)).workflowTask().completed({ status: 'delivered', attempts: 4 });

    const budgets = async (h: typeof history) => (await replay(h.toJSON())).activities.map((a) => a.maximumAttempts);

    expect(await budgets(history)).toEqual([8, 8 - 6]);
    expect(await budgets(continued)).toEqual([8 - 3]);
  });

  it('sees only the outcome of an attempt the server retried after a heartbeat timeout', async () => {
    const history = deliveryHistory().workflowTask();
    const first = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    // The first execution's worker died before sending: no event for it, only the second's start (attempt 2) and result.
    history
      .activityCompleted(first, delivered(1), { attempt: 2, lastFailure: heartbeatTimeoutFailure() })
      .workflowTask()
      .completed({ status: 'delivered', attempts: 1 });

    const commands = await replay(history.toJSON());

    expect(commands.activities).toEqual([{ activityType: attempt, maximumAttempts: 8 }]);
  });

  it('tops up with the count it last knew when the last execution timed out on its heartbeat', async () => {
    const history = deliveryHistory().workflowTask();
    const first = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history
      .activityTimedOut(first, 'RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED', { attempt: 8, lastFailure: sendFailed(5) })
      .workflowTask()
      .patchMarker(PATCHES.topUpUnsentAttempts);
    history.timerFired(history.startTimer(30_000)).workflowTask();
    // A timeout carries no count: the row, not this budget, stops the sends at 8.
    const topUp = history.scheduleActivity(attempt, [ref], attemptOptions(8));
    history.activityFailed(topUp, exhausted, 'RETRY_STATE_NON_RETRYABLE_FAILURE', { attempt: 3 }).workflowTask();
    const deadLetter = history.scheduleActivity('deadLetter', [ref], deadLetterOptions);
    history.activityCompleted(deadLetter, undefined).workflowTask().completed({ status: 'dead_lettered' });

    const commands = await replay(history.toJSON());

    expect(commands.activities.map((a) => [a.activityType, a.maximumAttempts])).toEqual([
      [attempt, 8],
      [attempt, 8],
      ['deadLetter', undefined],
    ]);
  });

  it('carries the sends made across a continue-as-new while held', async () => {
    const history = heldAfterThreeSends().continuedAsNew('run-0002', [ref, { sent: 3 }]);

    const commands = await replay(history.toJSON());

    expect(commands.continuedAsNew).toEqual([[ref, { sent: 3 }]]);
  });
});

/*
 * Histories the current code wrote on a real Temporal server (the live suites record them with
 * RECORD_TEMPORAL_HISTORIES=1). Each must replay to the commands it recorded, so a change that
 * running deliveries could not replay fails here before it reaches a worker.
 */
describe('deliverWebhook over histories recorded on a real server', () => {
  const recorded = new Map(recordedHistories().map((r) => [r.name, r.history]));
  const activityTypes = async (name: string) => (await replay(recorded.get(name)!)).activities.map((a) => a.activityType);

  it('has a recorded history of every path a delivery ends by', () => {
    expect([...recorded.keys()]).toEqual(
      expect.arrayContaining([
        'delivered-first-attempt.json',
        'delivered-after-two-failures.json',
        'dead-lettered-after-eight.json',
        'endpoint-gone.json',
        'held-by-global-switch-then-released.json',
        'abandoned-secret-unopenable.json',
      ]),
    );
  });

  it('delivers on the first attempt with one attempt activity', async () => {
    expect(await activityTypes('delivered-first-attempt.json')).toEqual(['attemptDelivery']);
  });

  it('retries inside one attempt activity (the retry policy), then delivers', async () => {
    expect(await activityTypes('delivered-after-two-failures.json')).toEqual(['attemptDelivery']);
  });

  it('dead-letters once the attempt activity ran out of its 8 attempts', async () => {
    expect(await activityTypes('dead-lettered-after-eight.json')).toEqual(['attemptDelivery', 'deadLetter']);
  });

  it('ends dead-lettered, without retrying, when a failure of ours abandoned the delivery', async () => {
    expect(await activityTypes('abandoned-secret-unopenable.json')).toEqual(['attemptDelivery']);
  });

  it('fails without a dead letter when the endpoint is gone', async () => {
    expect(await activityTypes('endpoint-gone.json')).toEqual(['attemptDelivery']);
  });

  it('attempts again at once when the release signal arrives before the held interval ends', async () => {
    const history = recorded.get('held-by-global-switch-then-released.json')!;
    const types = history.events.map((e) => e.eventType);
    expect(types).toEqual(expect.arrayContaining(['EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED', 'EVENT_TYPE_TIMER_CANCELED']));
    expect(await activityTypes('held-by-global-switch-then-released.json')).toEqual(['attemptDelivery', 'attemptDelivery']);
  });

  it('replays every recorded history with tracing on: a worker whose bundle has the OpenTelemetry workflow interceptors', async () => {
    // Turning tracing on restarts workers over running deliveries recorded without it.
    const workflowBundle = await productionWorkflowBundle({ traced: true });
    const sinks = { exporter: { export: { fn: () => undefined } } };
    for (const history of recorded.values()) {
      await expect(Worker.runReplayHistory({ workflowBundle, sinks }, historyFromJSON(history), workflowIdFor(ref))).resolves.toBeUndefined();
    }
  }, 120_000);

  it('fails replay of a recorded history when the workflow would schedule another activity', async () => {
    const history = structuredClone(recorded.get('delivered-first-attempt.json')!);
    firstEvent(history as HistoryJSON, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED').activityTaskScheduledEventAttributes.activityType.name = 'deadLetter';
    await expect(replay(history)).rejects.toBeInstanceOf(DeterminismViolationError);
  });
});

describe('workflowIdFor', () => {
  it('names a delivery by organization, endpoint and event so operators can find it by prefix', () => {
    expect(workflowIdFor(ref)).toBe('webhook-delivery/org_01/end_01/evt_01');
  });

  it('gives the same id to the same endpoint and event whatever the delivery row', () => {
    expect(workflowIdFor({ ...ref, deliveryId: 'dlv_02' } as DeliveryRef)).toBe(workflowIdFor(ref));
  });

  it('keeps ids apart when a part contains a slash', () => {
    expect(workflowIdFor({ ...ref, endpointId: 'a/b', eventId: 'c' })).not.toBe(
      workflowIdFor({ ...ref, endpointId: 'a', eventId: 'b/c' }),
    );
  });
});

describe('TemporalDeliveryEngine', () => {
  type StartRequest = StartWorkflowExecutionRequest;
  type Payload = NonNullable<NonNullable<StartRequest['input']>['payloads']>[number];
  const decode = (p: Payload) => JSON.parse(Buffer.from(p.data!).toString()) as unknown;

  // A connection whose service records start requests, so the real Client encodes them.
  function fakeConnection(answer: (req: StartRequest) => Promise<unknown>) {
    const requests: StartRequest[] = [];
    const close = jest.fn(async () => undefined);
    const connection = {
      workflowService: {
        startWorkflowExecution: async (req: StartRequest) => {
          requests.push(req);
          return answer(req);
        },
      },
      operatorService: {},
      plugins: [],
      close,
      ensureConnected: async () => undefined,
      withDeadline: (_deadline: unknown, fn: () => Promise<unknown>) => fn(),
      withMetadata: (_metadata: unknown, fn: () => Promise<unknown>) => fn(),
      withAbortSignal: (_signal: unknown, fn: () => Promise<unknown>) => fn(),
    } as unknown as ConnectionLike;
    const client = new Client({ connection, namespace: 'default' });
    return { client, requests, close };
  }

  const meta = { eventType: 'post.published', targetHost: 'hooks.example.com' };
  const started = async () => ({ runId: 'run-0001', started: true });

  it('starts deliverWebhook under the delivery workflow id, never beside or after the same delivery', async () => {
    const { client, requests } = fakeConnection(started);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' });

    await expect(engine.startAwaited(ref, meta)).resolves.toBe('started');

    const [req] = requests;
    expect(req).toMatchObject({
      workflowId: 'webhook-delivery/org_01/end_01/evt_01',
      workflowType: { name: 'deliverWebhook' },
      taskQueue: { name: 'webhook-delivery' },
    });
    expect(decodeWorkflowIdConflictPolicy(req!.workflowIdConflictPolicy)).toBe('FAIL');
    expect(decodeWorkflowIdReusePolicy(req!.workflowIdReusePolicy)).toBe('REJECT_DUPLICATE');
    expect(decode(req!.input!.payloads![0]!)).toEqual(ref);
    const memo = Object.fromEntries(Object.entries(req!.memo!.fields!).map(([k, v]) => [k, decode(v)]));
    expect(memo).toEqual({ organizationId: 'org_01', endpointId: 'end_01', eventId: 'evt_01', ...meta });
    expect(req!.searchAttributes).toBeUndefined();
  });

  it('sets the keyword search attributes when asked to', async () => {
    const { client, requests } = fakeConnection(started);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery', searchAttributes: true });

    await engine.startAwaited(ref, meta);

    const fields = requests[0]!.searchAttributes!.indexedFields!;
    const attributes = Object.fromEntries(
      Object.entries(fields).map(([k, v]) => [
        k,
        { value: decode(v), type: Buffer.from(v.metadata!.type!).toString() },
      ]),
    );
    expect(attributes).toEqual({
      OrganizationId: { value: 'org_01', type: 'Keyword' },
      EndpointId: { value: 'end_01', type: 'Keyword' },
      EventId: { value: 'evt_01', type: 'Keyword' },
      DeliveryOutcome: { value: 'sending', type: 'Keyword' },
      DeliveryAttempts: { value: 0, type: 'Int' },
    });
  });

  it('treats a duplicate start as a no-op, and remembers that the workflow exists', async () => {
    const alreadyStarted = async () => {
      throw Object.assign(new Error('workflow execution already started'), { code: 6 });
    };
    const { client } = fakeConnection(alreadyStarted);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' });

    expect(engine.hasWorkflow(ref)).toBe(false);
    await expect(engine.startAwaited(ref, meta)).resolves.toBe('existed');
    expect(engine.hasWorkflow(ref)).toBe(true);
  });

  it('passes on any other start failure to the sweep that awaited it', async () => {
    const unavailable = async () => {
      throw Object.assign(new Error('connection refused'), { code: 14 });
    };
    const { client } = fakeConnection(unavailable);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' });

    const failure = engine.startAwaited(ref, meta);
    await expect(failure).rejects.toThrow();
    await expect(failure).rejects.not.toBeInstanceOf(WorkflowExecutionAlreadyStartedError);
  });

  it('answers a caller’s start at once, whether Temporal answers or not, and starts it after', async () => {
    let answer: () => void = () => undefined;
    let fakeAnswer: () => Promise<unknown> = async () => undefined;
    const asked = new Promise<void>((asking) => {
      fakeAnswer = () =>
        new Promise((resolve) => {
          answer = () => resolve({ runId: 'run-0001', started: true });
          asking();
        });
    });
    const { client } = fakeConnection(() => fakeAnswer());
    const recovered = jest.fn();
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery', onRecovered: recovered });

    await expect(engine.start(ref, meta)).resolves.toEqual({ workflowId: workflowIdFor(ref) });
    await asked;
    expect(engine.hasWorkflow(ref)).toBe(false);
    answer();
    await engine.close();
    expect(engine.hasWorkflow(ref)).toBe(true);
    expect(recovered).not.toHaveBeenCalled();
  });

  it('leaves starts to the sweep while Temporal is known to be down, and wakes the sweep once a start succeeds again', async () => {
    let up = false;
    const { client, requests } = fakeConnection(async () => {
      if (!up) throw Object.assign(new Error('connection refused'), { code: 14 });
      return { runId: 'run-0001', started: true };
    });
    const recovered = jest.fn();
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery', onRecovered: recovered });

    await expect(engine.startAwaited(ref, meta)).rejects.toThrow();
    const tried = requests.length;
    await engine.start({ ...ref, deliveryId: 'del_02', eventId: 'evt_02' }, meta);
    await engine.close();
    expect(requests).toHaveLength(tried);
    up = true;
    await expect(engine.startAwaited(ref, meta)).resolves.toBe('started');
    expect(recovered).toHaveBeenCalledTimes(1);
  });

  it('leaves the caller’s connection open when closed', async () => {
    const { client, close } = fakeConnection(started);
    await new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' }).close();

    expect(close).not.toHaveBeenCalled();
  });
});
