import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { openDatabase, type MikroORM, databaseAt } from '../../src/db';
import { createLogger } from '../../src/config';
import { DeliveryMetrics, DeliveryRecords } from '../../src/delivery';
import { serveWorkerEndpoints } from '../../src/delivery/worker-endpoints';
import { createTestDatabase } from '../support/databases';
import { startPgProxy, type PgProxy } from '../support/pg-proxy';

/**
 * The Temporal worker's own endpoints (no Temporal server runs here, so they are served
 * over the worker's parts): the API's delivery metrics, health, and readiness that names
 * what is down.
 */
let orm: MikroORM;
let proxy: PgProxy;
let drop: () => Promise<void>;
let base: string;
let running = true;
let close: () => void;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  proxy = await startPgProxy(database.url);
  orm = await openDatabase(databaseAt(proxy.url), { pool: { min: 0, max: 2 } });
  const registry = new Registry();
  const metrics = new DeliveryMetrics(registry, { orm, records: new DeliveryRecords() });
  metrics.observe('attempt_failed');
  const server = await serveWorkerEndpoints({ port: 0, host: '127.0.0.1', registry, orm, logger: createLogger('silent'), running: () => running });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  close = () => server.close();
});
afterAll(async () => {
  close?.();
  await orm?.close();
  await proxy?.close();
  await drop?.();
});

it('serves the delivery metrics the API serves, with what this worker observed', async () => {
  const answer = await fetch(`${base}/metrics`);
  expect(answer.status).toBe(200);
  const text = await answer.text();
  for (const name of ['webhook_delivery_events_total', 'webhook_delivery_lag_seconds', 'webhook_kill_switch_enabled', 'webhook_dead_letters', 'webhook_delivery_engine_reachable']) {
    expect(text).toContain(`# TYPE ${name}`);
  }
  expect(text).toContain('webhook_delivery_events_total{event="attempt_failed"} 1');
});

it('is alive on /healthz and ready on /readyz while the database answers and the worker polls', async () => {
  expect((await fetch(`${base}/healthz`)).status).toBe(200);
  const ready = await fetch(`${base}/readyz`);
  expect({ status: ready.status, body: await ready.json() }).toEqual({ status: 200, body: { status: 'ready' } });
});

it('names what is down on /readyz: the database, the worker', async () => {
  proxy.cut();
  running = false;
  try {
    const ready = await fetch(`${base}/readyz`);
    expect({ status: ready.status, body: await ready.json() }).toEqual({ status: 503, body: { status: 'unavailable', down: ['database', 'worker'] } });
  } finally {
    proxy.restore();
    running = true;
  }
});
