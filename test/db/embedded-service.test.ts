import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Client } from 'pg';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { client, rest, type TransportName } from '../support/clients';
import { approveSandboxAccount } from '../support/connections';

/**
 * The service on its development default with no PostgreSQL (embedded PGlite, every pool
 * connection on the one PGlite session): concurrent publishes, re-publishes, the platform's
 * own events and lists all answer, and store what they say. Named prepared statements
 * would collide there ("prepared statement ... already exists"), so none is sent.
 */
const INTERNAL_TOKEN = 'embedded-test-token-0123456789abcdef0123456789';
const CATALOG = ['connection.verified', 'connection.held', 'connection.disconnected', 'post.held', 'post.released'];

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let root: string;
let service: ChildProcessWithoutNullStreams;
let stderr = '';
let next: () => Promise<any>;
let ready: { url: string; databaseUrl: string; apiKey: string; organizationId: string };
let db: Client;

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'pglite-service-'));
  service = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, 'embedded-service.ts'), path.join(root, '.data'), String(await closedPort())], {
    env: { ...process.env, INTERNAL_SERVICE_TOKENS: `scheduler:${INTERNAL_TOKEN}` },
  });
  service.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const lines = createInterface({ input: service.stdout });
  next = () =>
    new Promise<any>((resolve, reject) => {
      lines.once('line', (line) => resolve(JSON.parse(line)));
      service.once('exit', (code) => reject(new Error(`the service exited with ${code}: ${stderr}`)));
    });
  ready = await next();
  db = new Client({ connectionString: ready.databaseUrl });
  await db.connect();
}, 120_000);
afterAll(async () => {
  await db?.end();
  if (service && service.exitCode === null && service.signalCode === null) {
    const exited = new Promise((resolve) => service.once('exit', resolve));
    service.stdin.write('stop\n');
    await exited;
  }
  rmSync(root, { recursive: true, force: true });
});

const api = (method: string, route: string, body?: unknown) => rest(ready.url, method, route, { apiKey: ready.apiKey, body });

/** The README's connection walkthrough and a held post's way back, each step's platform events recorded with it. */
async function walkthrough(): Promise<void> {
  const started = await api('POST', '/api/v1/connections/start', { toolkit: 'instagram' });
  expect(started.status).toBe(200);
  const bakery = await approveSandboxAccount(ready.url, started.body.redirectUrl, 'bakery');
  const completed = await api('POST', '/api/v1/connections/complete', { state: started.body.state, connectedAccountId: bakery });
  expect(completed.status).toBe(200);
  const id = completed.body.connection.id as string;
  expect((await api('POST', `/api/v1/connections/${id}/confirm`, { confirmIdentity: true })).body.connection.status).toBe('verified');
  const scheduled = await api('POST', '/api/v1/posts', { connectionId: id, text: 'Fresh bread at seven', scheduledAt: new Date(Date.now() + 86_400_000).toISOString() });
  expect(scheduled.status).toBe(200);
  // A reconnect that returns another account holds the destination and its post.
  const again = await api('POST', '/api/v1/connections/start', { toolkit: 'instagram', connectionId: id });
  const creator = await approveSandboxAccount(ready.url, again.body.redirectUrl, 'creator');
  const held = await api('POST', '/api/v1/connections/complete', { state: again.body.state, connectedAccountId: creator });
  expect(held.body.connection.status).toBe('held');
  expect((await api('POST', `/api/v1/connections/${id}/confirm`, { confirmIdentity: true })).body.connection.status).toBe('verified');
  expect((await api('POST', `/api/v1/connections/${id}/release`, {})).body.releasedPosts).toBe(1);
  const disabled = await api('POST', `/api/v1/connections/${id}/disable`, { reason: 'Moving to the new account' });
  expect(disabled.status).toBe(200);
  expect(disabled.body.connection.status).toBe('disconnected');
}

it('answers concurrent publishes, re-publishes, platform events and lists over several pool connections, and stores their rows', async () => {
  const created = await api('POST', '/api/v1/webhooks', { url: 'https://hooks.example.com/in', eventNames: ['order.shipped', ...CATALOG] });
  expect(created.status).toBe(200);
  const endpointId = created.body.endpoint.id as string;
  const transports: TransportName[] = ['connect', 'grpc'];
  const publish = (n: number) =>
    client(EventService, ready.url, transports[n % 2]!, INTERNAL_TOKEN).publishEvent({
      organizationId: ready.organizationId,
      eventId: `order-${n}`,
      eventType: 'order.shipped',
      payload: { order: n },
    });
  const list = async () => {
    const listed = await api('GET', '/api/v1/webhooks');
    expect(listed.status).toBe(200);
    return listed;
  };
  const burst = () => Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((n) => (n % 3 === 0 ? Promise.all([publish(n), list()]).then(([p]) => p) : publish(n))));

  const [first] = await Promise.all([burst(), walkthrough()]);
  for (const answer of first) {
    expect(answer.event?.replayed).toBe(false);
    expect(answer.event?.deliveries.map((d) => d.endpointId)).toEqual([endpointId]);
  }
  // Publishing the same events again records nothing and answers with the first deliveries.
  const replayed = await burst();
  expect(replayed.map((a) => a.event?.replayed)).toEqual(Array(8).fill(true));
  expect(replayed.map((a) => a.event?.deliveries[0]?.deliveryId)).toEqual(first.map((a) => a.event?.deliveries[0]?.deliveryId));

  const events = await db.query<{ event_id: string; event_type: string; publisher: string; deliveries: number }>(
    `select e.event_id, e.event_type, e.publisher,
            (select count(*)::int from webhook_deliveries d where d.event_id = e.event_id and d.endpoint_id = $2) as deliveries
       from events e where e.organization_id = $1 order by e.event_type, e.event_id`,
    [ready.organizationId, endpointId],
  );
  const orders = events.rows.filter((r) => r.event_type === 'order.shipped');
  expect(orders).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((n) => ({ event_id: `order-${n}`, event_type: 'order.shipped', publisher: 'scheduler', deliveries: 1 })));
  const platform = events.rows.filter((r) => r.event_type !== 'order.shipped');
  expect(platform.map((r) => r.event_type)).toEqual([
    'connection.disconnected',
    'connection.held',
    'connection.verified',
    'connection.verified',
    'post.held',
    'post.held',
    'post.released',
  ]);
  expect(platform.every((r) => r.publisher === 'platform' && r.deliveries === 1)).toBe(true);
  const all = await db.query<{ n: number }>('select count(*)::int as n from webhook_deliveries where endpoint_id = $1', [endpointId]);
  expect(all.rows[0]!.n).toBe(15);
  expect((await list()).body.endpoints[0].recentDeliveries).toHaveLength(5);

  service.stdin.write('pool\n');
  expect((await next()).connections).toBeGreaterThan(1);
  expect(stderr).not.toMatch(/already exists|"level":50/);
}, 120_000);
