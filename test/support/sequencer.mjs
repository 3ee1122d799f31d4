import Sequencer from '@jest/test-sequencer';

/**
 * The suites that take longest, longest first: they wait on child processes, real timers
 * and hundreds of requests. Jest starts the suites it has timings for longest first, but a
 * fresh checkout has none and it starts them by file size, which can leave one of these to
 * start near the end and run alone; started first, they overlap the many short suites.
 */
const LONGEST_FIRST = [
  // The contract's real 30 s x 8 on each engine: 212 s each of mostly waiting, the floor of the run.
  'test/delivery/contract-timing.temporal.test.ts',
  'test/delivery/contract-timing.embedded.test.ts',
  'test/delivery/engine-contract.test.ts',
  // 800 deliveries to receivers that answer after 9 s (or never), on each engine, the Temporal worker a process of its own.
  'test/delivery/noisy-neighbour.test.ts',
  // Temporal's own server on a PostgreSQL cluster of its own, two APIs and two workers as processes, a 1,000-endpoint fan-out.
  'test/delivery/temporal-production.test.ts',
  'test/webhooks/auto-pause.test.ts',
  'test/delivery/temporal-live.test.ts',
  // Chromium through the customer journey on both engines: about a minute.
  'test/portal/browser.test.ts',
  'test/robustness/hostile-grpc.test.ts',
  'test/robustness/hostile-rest.test.ts',
  'test/db/embedded.test.ts',
  'test/retention/embedded-sweep.test.ts',
  'test/delivery/engine-retries.test.ts',
  'test/webhooks/limits.test.ts',
  'test/docs/readme.test.ts',
  'test/robustness/state-tokens.test.ts',
  'test/delivery/database-outage.test.ts',
  'test/delivery/workflow-versioning.test.ts',
  'test/connections/slow-provider.test.ts',
  'test/delivery/temporal-unreachable.test.ts',
];

export default class LongestFirst extends Sequencer {
  sort(tests) {
    const rank = (test) => {
      const at = LONGEST_FIRST.findIndex((file) => test.path.endsWith(`/${file}`));
      return at < 0 ? LONGEST_FIRST.length : at;
    };
    // Array.prototype.sort is stable: the rest keep jest's own order (failed first, then by time or size).
    return super.sort(tests).sort((a, b) => rank(a) - rank(b));
  }
}
