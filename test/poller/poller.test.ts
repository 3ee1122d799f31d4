import { Poller } from '../../src/poller';

/** A loop whose rounds end when the test says: each round waits on its own latch. */
function loop(intervalMs = 1_000) {
  const rounds: { finish(): void; fail(error: Error): void }[] = [];
  const errors: unknown[] = [];
  let running = 0;
  let mostAtOnce = 0;
  let afterRounds = 0;
  const poller = new Poller({
    intervalMs,
    round: () =>
      new Promise<void>((resolve, reject) => {
        running++;
        mostAtOnce = Math.max(mostAtOnce, running);
        const end = () => running--;
        rounds.push({
          finish: () => {
            end();
            resolve();
          },
          fail: (error) => {
            end();
            reject(error);
          },
        });
      }),
    onError: (error) => errors.push(error),
    afterRound: () => afterRounds++,
  });
  return {
    poller,
    rounds,
    errors,
    get mostAtOnce() {
      return mostAtOnce;
    },
    get afterRounds() {
      return afterRounds;
    },
  };
}

/** Lets the promise callbacks of a round that just ended run. */
const settle = () => jest.advanceTimersByTimeAsync(0);

beforeEach(() => {
  jest.useFakeTimers({ doNotFake: ['nextTick'] });
});
afterEach(() => {
  jest.useRealTimers();
});

it('runs the first round on start, and the next one an interval after it ended', async () => {
  const l = loop(1_000);
  l.poller.wake();
  expect(l.rounds).toHaveLength(0);
  l.poller.start();
  l.poller.start();
  expect(l.rounds).toHaveLength(1);
  l.rounds[0]!.finish();
  await settle();
  expect(l.afterRounds).toBe(1);
  await jest.advanceTimersByTimeAsync(999);
  expect(l.rounds).toHaveLength(1);
  await jest.advanceTimersByTimeAsync(1);
  expect(l.rounds).toHaveLength(2);
  l.rounds[1]!.finish();
  await l.poller.stop();
});

it('runs one round at a time: wakes during a round make exactly one more, at once after it', async () => {
  const l = loop(60_000);
  l.poller.start();
  l.poller.wake();
  l.poller.wake();
  expect(l.rounds).toHaveLength(1);
  expect(l.poller.busy).toBe(true);
  l.rounds[0]!.finish();
  await settle();
  expect(l.rounds).toHaveLength(2);
  expect(l.mostAtOnce).toBe(1);
  l.rounds[1]!.finish();
  await settle();
  expect(l.rounds).toHaveLength(2);
  expect(l.poller.busy).toBe(false);
  // Woken while waiting: the round comes now, not at the end of the interval.
  l.poller.wake();
  expect(l.rounds).toHaveLength(3);
  l.rounds[2]!.finish();
  await l.poller.stop();
});

it('hands a failed round to onError and goes on', async () => {
  const l = loop(1_000);
  l.poller.start();
  const failure = new Error('database unreachable');
  l.rounds[0]!.fail(failure);
  await settle();
  expect(l.errors).toEqual([failure]);
  await jest.advanceTimersByTimeAsync(1_000);
  expect(l.rounds).toHaveLength(2);
  l.rounds[1]!.finish();
  await l.poller.stop();
});

it('stops: waits for the round running, then runs none, woken or not', async () => {
  const l = loop(1_000);
  l.poller.start();
  l.poller.wake();
  let stopped = false;
  const stopping = l.poller.stop().then(() => (stopped = true));
  await settle();
  expect(stopped).toBe(false);
  l.rounds[0]!.finish();
  await stopping;
  l.poller.wake();
  await jest.advanceTimersByTimeAsync(10_000);
  expect(l.rounds).toHaveLength(1);
});
