import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { DeterminismViolationError } from '@temporalio/workflow';
import { PATCHES } from '../../workflows/delivery';
import { RELEASE_SIGNAL } from '../../workflows/policy';
import { attemptOptions, deliveryHistory, quietWorkerLogs, ref, replay } from './delivery-histories';
import { recordedHistories } from './recorded-histories';

/*
 * The gate for changing deliverWebhook (docs/changing-the-workflow.md): every stored history
 * must still replay. Here the same change, one extra activity on the held path, is made twice:
 * as is, which breaks deliveries that were held when the new worker took over, and behind
 * patched(), which keeps them on the path they started.
 */
const unpatched = require.resolve('./fixtures/held-noted-unpatched');
const patched = require.resolve('./fixtures/held-noted-patched');

// Hand-written histories of the workflow before its patches, and histories the current code recorded on a real server.
const stored = [
  ...readdirSync(path.join(__dirname, 'histories')).filter((file) => file.endsWith('.json')),
  ...recordedHistories().map((r) => `recorded/${r.name}`),
];
const heldOnTheWay = ['kill-switch-held-continued-as-new.json', 'kill-switch-held-then-sent.json', 'recorded/held-by-global-switch-then-released.json'];

function load(file: string): { events: unknown[] } {
  return JSON.parse(readFileSync(path.join(__dirname, 'histories', file), 'utf8'));
}

/** A delivery held under the release-signal patch, released 2 s into its interval. */
function releasedWhileHeld() {
  const history = deliveryHistory().workflowTask();
  const held = history.scheduleActivity('attemptDelivery', [ref], attemptOptions(8));
  history.activityCompleted(held, { kind: 'held', sent: 0 }).workflowTask().patchMarker(PATCHES.releaseSignal);
  const interval = history.startTimer(30_000);
  history.advance(2_000).signaled(RELEASE_SIGNAL).workflowTask().timerCanceled(interval);
  const again = history.scheduleActivity('attemptDelivery', [ref], attemptOptions(8));
  return history.activityCompleted(again, { kind: 'delivered', attempt: 1, status: 200 }).workflowTask().completed({ status: 'delivered', attempts: 1 });
}

beforeAll(quietWorkerLogs);

describe('changing deliverWebhook while deliveries run', () => {
  it('holds histories that pass through the held path', () => {
    expect(stored).toEqual(expect.arrayContaining(heldOnTheWay));
  });

  it.each(heldOnTheWay)('fails replay of %s when the held path changed without patched()', async (file) => {
    await expect(replay(load(file), unpatched)).rejects.toBeInstanceOf(DeterminismViolationError);
  });

  it('fails replay of a delivery released under the release-signal patch when the held path changed without patched()', async () => {
    await expect(replay(releasedWhileHeld().toJSON(), unpatched)).rejects.toBeInstanceOf(DeterminismViolationError);
  });

  it.each(stored)('replays %s when the same change is behind patched()', async (file) => {
    await expect(replay(load(file), patched)).resolves.toBeDefined();
  });

  it('replays a delivery released under the release-signal patch when the same change is behind patched()', async () => {
    await expect(replay(releasedWhileHeld().toJSON(), patched)).resolves.toBeDefined();
  });
});
