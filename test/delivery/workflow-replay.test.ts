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
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { DefaultLogger, makeTelemetryFilterString, Runtime, Worker } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { FAILURE_TYPES, type DeliveryRef } from '../../src/delivery/contract';
import { TemporalDeliveryEngine } from '../../src/delivery/temporal-engine';
import { workflowIdFor } from '../../src/delivery/workflow-id';
import { ATTEMPT_ACTIVITY_OPTIONS } from '../../workflows/delivery';
import { ACTIVITY_START_TO_CLOSE_MS, DELIVERY_RETRY_POLICY } from '../../workflows/policy';

/*
 * No Temporal server can run here, so the histories under ./histories were written by hand in
 * the shape a 1.24 worker records. The first WorkflowTaskCompleted carries sdkMetadata
 * coreUsedFlags [1] as a real worker does: without it, replay skips the activity id/type checks
 * to stay compatible with histories from old SDKs, and a wrong activity would replay cleanly.
 */
type HistoryJSON = { events: Array<Record<string, any>> };

const ref: DeliveryRef = { deliveryId: 'dlv_01', organizationId: 'org_01', endpointId: 'end_01', eventId: 'evt_01' };

function loadHistory(name: string): HistoryJSON {
  return JSON.parse(readFileSync(path.join(__dirname, 'histories', name), 'utf8')) as HistoryJSON;
}

function firstEvent(history: HistoryJSON, eventType: string): Record<string, any> {
  const event = history.events.find((e) => e.eventType === eventType);
  if (!event) throw new Error(`history has no ${eventType}`);
  return event;
}

function replay(history: HistoryJSON): Promise<void> {
  return Worker.runReplayHistory(
    { workflowsPath: require.resolve('../../workflows') },
    historyFromJSON(history),
    workflowIdFor(ref),
  );
}

beforeAll(() => {
  // The negative cases make the worker log the violation they assert; keep passing runs quiet.
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } },
  });
});

describe('deliverWebhook', () => {
  it.each([
    ['success.json', 'returns delivered after one attempt'],
    ['exhausted-dead-letter.json', 'dead-letters once all 8 attempts failed'],
    ['endpoint-gone.json', 'fails without a dead letter when the endpoint is gone'],
    ['kill-switch-held-then-sent.json', 'waits one interval while the kill switch holds it, then delivers'],
    ['kill-switch-held-continued-as-new.json', 'continues as new while held once Temporal suggests it'],
  ])('%s: %s', async (file) => {
    await expect(replay(loadHistory(file))).resolves.toBeUndefined();
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

    await expect(engine.start(ref, meta)).resolves.toEqual({ workflowId: 'webhook-delivery/org_01/end_01/evt_01' });

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

    await engine.start(ref, meta);

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
    });
  });

  it('treats a duplicate start as a no-op that returns the same workflow id', async () => {
    const alreadyStarted = async () => {
      throw Object.assign(new Error('workflow execution already started'), { code: 6 });
    };
    const { client } = fakeConnection(alreadyStarted);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' });

    await expect(engine.start(ref, meta)).resolves.toEqual({ workflowId: workflowIdFor(ref) });
  });

  it('passes on any other start failure', async () => {
    const unavailable = async () => {
      throw Object.assign(new Error('connection refused'), { code: 14 });
    };
    const { client } = fakeConnection(unavailable);
    const engine = new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' });

    const failure = engine.start(ref, meta);
    await expect(failure).rejects.toThrow();
    await expect(failure).rejects.not.toBeInstanceOf(WorkflowExecutionAlreadyStartedError);
  });

  it('leaves the caller’s connection open when closed', async () => {
    const { client, close } = fakeConnection(started);
    await new TemporalDeliveryEngine({ client, taskQueue: 'webhook-delivery' }).close();

    expect(close).not.toHaveBeenCalled();
  });
});
