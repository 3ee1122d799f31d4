import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { createLogger } from '../../src/config/logger';
import {
  DeliveryAttempts,
  DeliveryRecords,
  EmbeddedDeliveryEngine,
  FINAL_STATUSES,
  type DeliveryEvent,
  type DeliveryRef,
} from '../../src/delivery';
import { createOutboundClient, type OutboundClient } from '../../src/outbound';
import { MAX_ATTEMPTS } from '../../workflows/policy';
import { createTestDatabase } from '../support/databases';
import { startPgProxy, type PgProxy } from '../support/pg-proxy';
import { makeTestTls, type TestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import {
  TEST_SECRETS,
  endpoint,
  organization,
  recordDelivery,
  signedWith,
  storedAttempts,
  storedDeadLetters,
  storedDelivery,
  untilStored,
} from '../support/deliveries';

/**
 * PostgreSQL unreachable in the activity path both engines use (DeliveryAttempts): the
 * attempts reach PostgreSQL through a proxy the test cuts, and a real HTTPS receiver counts
 * what arrives. Whatever the database does, a delivery gets exactly 8 sends before it is
 * dead-lettered, and an answer that came back is never lost.
 *
 * Each outage starts at an explicit point (an outcome recorded, a request answered, a
 * connection about to send) and ends once the code behind the proxy has failed to reach
 * PostgreSQL a few times, so every scenario is sure to have met the outage.
 */
let direct: MikroORM;
let proxied: MikroORM;
let proxy: PgProxy;
let drop: () => Promise<void>;
let tls: TestTls;
const logger = createLogger('silent');
const RETRY_INTERVAL_MS = 100;
const OUTAGE = { refusals: 3 };

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  direct = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 2 } });
  proxy = await startPgProxy(database.url);
  proxied = await openDatabase(databaseAt(proxy.url), { pool: { min: 0, max: 20 } });
  tls = await makeTestTls();
});
afterAll(async () => {
  await proxied?.close();
  await proxy?.close();
  await direct?.close();
  await drop?.();
});

/** Where an outage begins: the nth time the point is reached (1-based). */
interface Fault {
  /** After the attempt's failure was recorded, before the next attempt begins. */
  afterFailureRecorded?: number;
  /** When the receiver has read the request and is about to answer it. */
  whenReceived?: number;
  /** When the connection to the receiver stands and the attempt is about to be marked dispatched. */
  beforeDispatch?: number;
}

interface Run {
  receiver: HttpsReceiver;
  ref: DeliveryRef;
  secret: string;
  /** Failed attempt executions the driver saw: what Temporal's retry policy would count. */
  failedExecutions: number;
  /** The outage, once it began; resolves when PostgreSQL is back. */
  outage: Promise<void> | null;
}

type Driver = (attempts: DeliveryAttempts, ref: DeliveryRef) => Promise<number>;

/** The embedded engine, claiming the delivery from its row as in production. */
const embeddedEngine: Driver = async (attempts, ref) => {
  const engine = new EmbeddedDeliveryEngine({ orm: proxied, attempts, logger, pollIntervalMs: 50, concurrency: 4 });
  engine.begin();
  try {
    await engine.start(ref, { eventType: 'webhook.test', targetHost: '127.0.0.1' });
    await untilStored(direct, ref.deliveryId, (row) => (FINAL_STATUSES as readonly string[]).includes(row.status), 60_000);
    await engine.idle();
  } finally {
    await engine.close();
  }
  return (await storedAttempts(direct, ref.deliveryId)).filter((a) => a.error !== null).length;
};

/**
 * DeliveryAttempts.run as the Temporal workflow drives it: one activity execution per call,
 * another after each retryable failure, the dead-letter activity after the last. (Temporal
 * waits the interval between executions; the attempt itself does not depend on it.)
 */
const attemptRuns: Driver = async (attempts, ref) => {
  let failed = 0;
  for (;;) {
    const result = await attempts.run(ref, { heartbeat: () => undefined, signal: new AbortController().signal });
    if (result.kind === 'delivered') return failed;
    if (result.kind !== 'failed') throw new Error(`unexpected attempt result ${JSON.stringify(result)}`);
    failed += 1;
    if (result.exhausted) {
      await attempts.deadLetter(ref);
      return failed;
    }
  }
};

async function deliver(driver: Driver, fault: Fault, status: number): Promise<Run> {
  let outage: Promise<void> | null = null;
  const begin = () => {
    expect(outage).toBeNull();
    outage = proxy.outage(OUTAGE);
  };
  let received = 0;
  const receiver = await startHttpsReceiver({
    tls,
    respond: () => {
      if (++received === fault.whenReceived) begin();
      return { status };
    },
  });
  try {
    const real = createOutboundClient({ allowCidrs: ['127.0.0.0/8'], extraCa: tls.caPem, timeoutMs: 5000, maxResponseBytes: 1024 });
    let connected = 0;
    const outbound: OutboundClient = {
      post: (url, headers, body, options = {}) =>
        real.post(url, headers, body, {
          ...options,
          beforeSend: async () => {
            if (++connected === fault.beforeDispatch) begin();
            return options.beforeSend ? options.beforeSend() : true;
          },
        }),
    };
    let failures = 0;
    const onEvent = (event: DeliveryEvent) => {
      if (event === 'attempt_failed' && ++failures === fault.afterFailureRecorded) begin();
    };
    const records = new DeliveryRecords({ retryIntervalMs: RETRY_INTERVAL_MS });
    const attempts = new DeliveryAttempts({ orm: proxied, records, secrets: TEST_SECRETS, outbound, logger, onEvent });

    const organizationId = await organization(direct);
    const { id: endpointId, secret } = await endpoint(direct, organizationId, { url: `${receiver.url}/hook` });
    const ref = await recordDelivery(direct, records, organizationId, endpointId);
    const failedExecutions = await driver(attempts, ref);
    expect(outage).not.toBeNull();
    await outage;
    return { receiver, ref, secret, failedExecutions, outage };
  } finally {
    proxy.restore();
    await receiver.close();
  }
}

async function expectEightSendsThenDeadLettered(run: Run): Promise<void> {
  const { receiver, ref, secret } = run;
  expect(receiver.requests).toHaveLength(MAX_ATTEMPTS);
  for (const request of receiver.requests) {
    expect(signedWith(request, secret)).toBe(true);
    expect(JSON.parse(request.rawBody).id).toBe(ref.eventId);
  }
  const attempts = await storedAttempts(direct, ref.deliveryId);
  expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  for (const attempt of attempts) {
    expect(attempt).toMatchObject({ dispatched_at: expect.any(Number), finished_at: expect.any(Number), response_status: 500, error: 'The endpoint answered HTTP 500.' });
  }
  expect(await storedDelivery(direct, ref.deliveryId)).toMatchObject({ status: 'dead_lettered', attempt_count: MAX_ATTEMPTS, next_attempt_at: null });
  expect(await storedDeadLetters(direct, ref.deliveryId)).toHaveLength(1);
  // What a Temporal retry policy counts equals the sends: no execution failed without one.
  expect(run.failedExecutions).toBe(MAX_ATTEMPTS);
}

describe.each([
  ['the embedded engine', embeddedEngine],
  ['DeliveryAttempts.run', attemptRuns],
])('through %s, a receiver answering 500', (_name, driver) => {
  it('gets exactly 8 sends, then dead-letter, when PostgreSQL is unreachable between attempts', async () => {
    await expectEightSendsThenDeadLettered(await deliver(driver, { afterFailureRecorded: 3 }, 500));
  }, 60_000);

  it("gets exactly 8 sends, then dead-letter, when PostgreSQL is unreachable during an attempt's bookkeeping", async () => {
    await expectEightSendsThenDeadLettered(await deliver(driver, { whenReceived: 4 }, 500));
  }, 60_000);

  it('gets exactly 8 sends, then dead-letter, when PostgreSQL is unreachable when the attempt is to be marked dispatched', async () => {
    const run = await deliver(driver, { beforeDispatch: 3 }, 500);
    await expectEightSendsThenDeadLettered(run);
  }, 60_000);
});

describe.each([
  ['the embedded engine', embeddedEngine],
  ['DeliveryAttempts.run', attemptRuns],
])('through %s, a receiver answering 200', (_name, driver) => {
  it('gets the delivery once, recorded as delivered once PostgreSQL is back, when PostgreSQL is unreachable while recording it', async () => {
    const { receiver, ref } = await deliver(driver, { whenReceived: 1 }, 200);
    expect(receiver.requests).toHaveLength(1);
    expect(await storedDelivery(direct, ref.deliveryId)).toMatchObject({ status: 'delivered', attempt_count: 1, last_response_status: 200, last_error: null });
    expect(await storedAttempts(direct, ref.deliveryId)).toEqual([expect.objectContaining({ attempt: 1, dispatched_at: expect.any(Number), response_status: 200, error: null })]);
  }, 60_000);
});
