import { CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { createLogger } from '../../src/config/logger';
import { DeliveryRecords, createActivities, type DeliveryActivities } from '../../src/delivery';
import { createOutboundClient } from '../../src/outbound';
import { HEARTBEAT_INTERVAL_MS } from '../../workflows/policy';
import { createTestDatabase } from '../support/databases';
import { startPgProxy, type PgProxy } from '../support/pg-proxy';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { TEST_SECRETS, endpoint, organization, recordDelivery, storedAttempts, storedDelivery } from '../support/deliveries';

/**
 * The attempt activity as Temporal runs it, cancelled: the POST is aborted wherever it is,
 * an attempt whose request was written counts (it may have arrived), one that never left
 * does not, and the activity heartbeats while it waits.
 */
let direct: MikroORM;
let proxied: MikroORM;
let proxy: PgProxy;
let drop: () => Promise<void>;
let receiver: HttpsReceiver;
const records = new DeliveryRecords();
let activities: DeliveryActivities;
let organizationId: string;
let receiverUrl: string;
/** Resolved when the receiver sees the connection of the hanging request close. */
let connectionClosed: Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  direct = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 2 } });
  proxy = await startPgProxy(database.url);
  proxied = await openDatabase(databaseAt(proxy.url), { pool: { min: 0, max: 4 } });
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({
    tls,
    respond: (_index, req) => {
      connectionClosed = new Promise((resolve) => req.socket.once('close', () => resolve()));
      return 'hang';
    },
  });
  receiverUrl = `${receiver.url}/hook`;
  activities = createActivities({
    orm: proxied,
    records,
    secrets: TEST_SECRETS,
    outbound: createOutboundClient({ allowCidrs: ['127.0.0.0/8'], extraCa: tls.caPem, timeoutMs: 25_000, maxResponseBytes: 1024 }),
    logger: createLogger('silent'),
  });
  organizationId = await organization(direct);
});
afterAll(async () => {
  await receiver?.close();
  await proxied?.close();
  await proxy?.close();
  await direct?.close();
  await drop?.();
});

async function newDelivery() {
  const { id } = await endpoint(direct, organizationId, { url: receiverUrl });
  return recordDelivery(direct, records, organizationId, id);
}

it('aborts the POST when cancelled while the receiver hangs, and counts the attempt it sent', async () => {
  const ref = await newDelivery();
  const before = receiver.requests.length;
  const env = new MockActivityEnvironment();
  const running = env.run(activities.attemptDelivery, ref);
  await receiver.waitForRequests(before + 1, 10_000);
  env.cancel();
  await expect(running).rejects.toBeInstanceOf(CancelledFailure);
  await connectionClosed;
  expect(receiver.requests).toHaveLength(before + 1);
  expect(await storedDelivery(direct, ref.deliveryId)).toMatchObject({ status: 'retrying', attempt_count: 1, last_error: 'The attempt was cancelled.' });
  expect(await storedAttempts(direct, ref.deliveryId)).toEqual([
    expect.objectContaining({ attempt: 1, dispatched_at: expect.any(Number), finished_at: expect.any(Number), response_status: null, error: 'The attempt was cancelled.' }),
  ]);
}, 30_000);

it('sends and counts nothing when cancelled before its request left, and heartbeats while it waits', async () => {
  const ref = await newDelivery();
  const before = receiver.requests.length;
  const env = new MockActivityEnvironment();
  const heartbeat = new Promise<void>((resolve) => env.once('heartbeat', () => resolve()));
  const refusedBefore = proxy.refused;
  proxy.cut();
  try {
    const running = env.run(activities.attemptDelivery, ref);
    // Waiting for PostgreSQL to begin the attempt: it says it is alive, as Temporal's heartbeat timeout needs.
    await heartbeat;
    expect(proxy.refused).toBeGreaterThan(refusedBefore);
    env.cancel();
    await expect(running).rejects.toBeInstanceOf(CancelledFailure);
  } finally {
    proxy.restore();
  }
  expect(receiver.requests).toHaveLength(before);
  expect(await storedDelivery(direct, ref.deliveryId)).toMatchObject({ status: 'pending', attempt_count: 0 });
  expect(await storedAttempts(direct, ref.deliveryId)).toEqual([]);
}, 5 * HEARTBEAT_INTERVAL_MS);
