import type { DeliveryRef } from '../../src/delivery/contract';
import { TakenInTurns, WorkflowStarts } from '../../src/delivery/workflow-starts';

/**
 * The starts that follow a publish on Temporal: one organization's burst must not queue
 * another organization's start behind it.
 */

function refOf(organizationId: string, i: number): DeliveryRef {
  return { deliveryId: `${organizationId}-${i}`, organizationId, endpointId: `${organizationId}-endpoint`, eventId: `evt_${i}` };
}

describe('TakenInTurns', () => {
  it('takes the keys in turns, each one oldest first', () => {
    const queue = new TakenInTurns<string>();
    for (const item of ['a1', 'a2', 'a3']) queue.add('a', item);
    queue.add('b', 'b1');
    queue.add('c', 'c1');
    queue.add('b', 'b2');
    const taken: string[] = [];
    for (let next = queue.take(); next; next = queue.take()) taken.push(next);
    expect(taken).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
    expect(queue.size).toBe(0);
  });
});

describe('WorkflowStarts', () => {
  it("starts another organization's delivery within one round of turns, not after a burst of thousands", async () => {
    const started: string[] = [];
    const gates: (() => void)[] = [];
    const starts = new WorkflowStarts(async (ref) => {
      started.push(ref.deliveryId);
      await new Promise<void>((resolve) => gates.push(resolve));
      return 'started';
    });
    for (let i = 0; i < 2_000; i++) starts.enqueue(refOf('a', i), { eventType: 'post.held', targetHost: 'a.example', series: 1 });
    starts.enqueue(refOf('b', 0), { eventType: 'post.held', targetHost: 'b.example', series: 1 });
    // Every slot holds one of A's; B's is taken within one round of turns (one start per
    // organization waiting: here A's next, then B's), not after A's other 1,984.
    const inFlight = started.length;
    expect(started.every((id) => id.startsWith('a-'))).toBe(true);
    for (let finished = 0; finished < 2; finished++) {
      gates.shift()!();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(started.slice(inFlight)).toContain('b-0');
    // Let the rest through, so close() returns.
    while (gates.length > 0) {
      for (const open of gates.splice(0)) open();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await starts.close();
    expect(started).toHaveLength(2_001);
  });
});
