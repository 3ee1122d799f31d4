import { readFileSync } from 'node:fs';
import path from 'node:path';
import { FAILURE_TYPES } from '../../src/delivery/contract';
import { attemptOptions, deadLetterOptions, deliveryHistory, quietWorkerLogs, ref, replay } from './delivery-histories';
import { applicationFailure } from './history-builder';

/*
 * The builder is trusted to write histories only because it reproduces, event for event, the
 * ones under ./histories, and those replay. They were recorded before the attempt activity
 * heartbeated (20 s start-to-close, no heartbeat timeout) and with core flag 1 only.
 */
const recordedBeforeHeartbeats = { ...attemptOptions(8), startToCloseTimeout: '20s', heartbeatTimeout: undefined };
const asRecorded = { coreUsedFlags: [1] };

function recorded(name: string): { events: unknown[] } {
  return JSON.parse(readFileSync(path.join(__dirname, 'histories', name), 'utf8'));
}

function heldThenWaited() {
  const history = deliveryHistory(asRecorded).workflowTask();
  history.activityCompleted(history.scheduleActivity('attemptDelivery', [ref], recordedBeforeHeartbeats), { kind: 'held' });
  history.workflowTask();
  history.timerFired(history.startTimer(30_000));
  return history;
}

const equivalents = {
  'success.json': () => {
    const history = deliveryHistory(asRecorded).workflowTask();
    const attempt = history.scheduleActivity('attemptDelivery', [ref], recordedBeforeHeartbeats);
    return history
      .activityCompleted(attempt, { kind: 'delivered', attempt: 1, status: 200 })
      .workflowTask()
      .completed({ status: 'delivered', attempts: 1 });
  },
  'exhausted-dead-letter.json': () => {
    const history = deliveryHistory(asRecorded).workflowTask();
    const attempt = history.scheduleActivity('attemptDelivery', [ref], recordedBeforeHeartbeats);
    history
      .activityFailed(attempt, applicationFailure('endpoint answered 503', FAILURE_TYPES.attemptFailed), 'RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED', { attempt: 8 })
      .workflowTask();
    const deadLetter = history.scheduleActivity('deadLetter', [ref], deadLetterOptions);
    return history.activityCompleted(deadLetter, undefined).workflowTask().completed({ status: 'dead_lettered' });
  },
  'endpoint-gone.json': () => {
    const history = deliveryHistory(asRecorded).workflowTask();
    const attempt = history.scheduleActivity('attemptDelivery', [ref], recordedBeforeHeartbeats);
    return history
      .activityFailed(
        attempt,
        applicationFailure('endpoint is disabled', FAILURE_TYPES.endpointGone, { nonRetryable: true }),
        'RETRY_STATE_NON_RETRYABLE_FAILURE',
      )
      .workflowTask()
      .completed({ status: 'failed', reason: 'endpoint is disabled' });
  },
  'kill-switch-held-then-sent.json': () => {
    const history = heldThenWaited().workflowTask();
    const attempt = history.scheduleActivity('attemptDelivery', [ref], recordedBeforeHeartbeats);
    return history
      .activityCompleted(attempt, { kind: 'delivered', attempt: 1, status: 204 })
      .workflowTask()
      .completed({ status: 'delivered', attempts: 1 });
  },
  'kill-switch-held-continued-as-new.json': () =>
    heldThenWaited().workflowTask({ suggestContinueAsNew: true }).continuedAsNew('run-0002', [ref]),
};

beforeAll(quietWorkerLogs);

describe('HistoryBuilder', () => {
  it.each(Object.entries(equivalents))('writes %s event for event as it was recorded', (file, build) => {
    expect(build().toJSON()).toEqual(recorded(file));
  });

  it.each(Object.entries(equivalents))('writes a %s that replays to the same commands as the recorded one', async (file, build) => {
    expect(await replay(build().toJSON())).toEqual(await replay(recorded(file)));
  });
});
