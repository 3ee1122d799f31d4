import { randomBytes, randomUUID } from 'node:crypto';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { testTemporalAddress } from '../support/temporal';
import { startWorkerProcess, type WorkerProcess } from '../support/worker-process';

/**
 * A deploy: the delivery worker (its own process, as `npm run worker` runs) gets SIGTERM
 * while it has attempts in flight whose receiver answers at +3 s, inside the 10 s deadline.
 * The worker lets them finish, then exits: each event arrived once and was answered, no
 * attempt was used by the stop, nothing was recorded against the endpoint.
 */
const PUBLISHER_TOKEN = 'shutdown-publisher-token-0123456789abcdef';
const IN_FLIGHT = 10;

let t: TestApp;
let receiver: HttpsReceiver;
let worker: WorkerProcess | undefined;

beforeAll(async () => {
  const tls = await makeTestTls();
  receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 200, delayMs: 3_000 }) });
  const env = {
    TEMPORAL_ADDRESS: testTemporalAddress(),
    TEMPORAL_TASK_QUEUE: `worker-shutdown-${randomBytes(6).toString('hex')}`,
    DELIVERY_EXTRA_CA_PEM: tls.caPem,
    INTERNAL_SERVICE_TOKENS: `publisher:${PUBLISHER_TOKEN}`,
    // All ten in flight at once on the one endpoint: above the default cap of 4 turns.
    DELIVERY_ENDPOINT_CONCURRENCY: String(IN_FLIGHT),
  };
  t = await startTestApp(env);
  worker = await startWorkerProcess({ ...env, DATABASE_URL: t.databaseUrl });
}, 120_000);

afterAll(async () => {
  if (worker && worker.child.exitCode === null) {
    worker.child.kill('SIGKILL');
    await worker.exited;
  }
  await receiver?.close();
  await t?.close();
});

it('a worker stopped with SIGTERM lets the attempts in flight finish, then exits', async () => {
  const tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/hook`, eventNames: ['post.held'] } });
  expect(created.status).toBe(200);
  const eventIds = Array.from({ length: IN_FLIGHT }, () => `evt_${randomUUID()}`);
  await client(EventService, t.url, 'grpc', PUBLISHER_TOKEN).publishEvents({
    events: eventIds.map((eventId) => ({ organizationId: tenant.organizationId, eventId, eventType: 'post.held' })),
  });

  await receiver.waitForRequests(IN_FLIGHT, 60_000);
  const signalledAt = Date.now();
  expect(receiver.requests.every((request) => request.answered === undefined)).toBe(true);
  const code = await worker!.stop();
  const exitedAfterMs = Date.now() - signalledAt;

  expect(code).toBe(0);
  // The receiver's answers went out to a client still there to read them.
  expect(receiver.requests.map((request) => request.answered)).toEqual(Array(IN_FLIGHT).fill(200));
  expect(exitedAfterMs).toBeGreaterThan(2_000);
  const received = receiver.requests.map((request) => (JSON.parse(request.rawBody) as { id: string }).id);
  expect(new Set(received)).toEqual(new Set(eventIds));
  expect(received).toHaveLength(IN_FLIGHT);

  const rows = await t.orm.em.fork().execute<{ status: string; attempt_count: number; last_error: string | null }[]>(
    'select status, attempt_count, last_error from webhook_deliveries where organization_id = ?',
    [tenant.organizationId],
  );
  expect(rows).toEqual(Array(IN_FLIGHT).fill({ status: 'delivered', attempt_count: 1, last_error: null }));
  const attempts = await t.orm.em.fork().execute<{ response_status: number | null; error_class: string | null }[]>(
    'select a.response_status, a.error_class from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id where d.organization_id = ?',
    [tenant.organizationId],
  );
  expect(attempts).toEqual(Array(IN_FLIGHT).fill({ response_status: 200, error_class: null }));
}, 120_000);
