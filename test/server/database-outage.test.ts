/**
 * A real outage: the service reaches PostgreSQL through a TCP relay this test owns, and
 * cutting the relay (listener closed, every relayed connection destroyed) takes the
 * database away from the service alone, as a network partition or a restart would.
 */
import net from 'node:net';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from '../../src/gen/grpc/health/v1/health_pb';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest, type TransportName } from '../support/clients';
import { createTestDatabase } from '../support/databases';

/** Relays connections to PostgreSQL until cut; can be opened again on the same port. */
class Relay {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  async open(): Promise<void> {
    const server = net.createServer((inbound) => {
      const outbound = net.connect(this.target.port, this.target.host);
      for (const socket of [inbound, outbound]) {
        this.sockets.add(socket);
        socket.once('close', () => this.sockets.delete(socket));
        socket.on('error', () => undefined);
      }
      inbound.pipe(outbound).pipe(inbound);
      inbound.once('close', () => outbound.destroy());
      outbound.once('close', () => inbound.destroy());
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  /** New connections are refused and every relayed one is dropped. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    const closed = new Promise<void>((resolve) => server?.close(() => resolve()) ?? resolve());
    await Promise.all([...this.sockets].map((socket) => new Promise<void>((resolve) => (socket.once('close', () => resolve()), socket.destroy()))));
    await closed;
  }
}

let t: TestApp;
let tenant: Tenant;
let relay: Relay;
let database: Awaited<ReturnType<typeof createTestDatabase>>;

beforeAll(async () => {
  database = await createTestDatabase();
  const direct = new URL(database.url);
  relay = new Relay({ host: direct.hostname, port: Number(direct.port || 5432) });
  await relay.open();
  const relayed = new URL(database.url);
  relayed.hostname = '127.0.0.1';
  relayed.port = String(relay.port);
  t = await startTestApp({}, { databaseUrl: relayed.toString() });
  tenant = await t.tenant();
});
afterAll(async () => {
  await relay.cut();
  await t?.close().catch(() => undefined);
  await database?.drop();
});

async function rpcRefusal(name: TransportName, requestId: string): Promise<{ code: string; reason: string | undefined; requestId: string | null }> {
  const connections = client(ConnectionService, t.url, name, tenant.apiKey);
  try {
    await connections.listConnections({}, { headers: { 'x-request-id': requestId } });
    return { code: 'OK', reason: undefined, requestId: null };
  } catch (error) {
    const e = ConnectError.from(error);
    return { code: Code[e.code]!, reason: e.findDetails(ErrorInfoSchema)[0]?.reason, requestId: e.metadata.get('x-request-id') };
  }
}

it('answers 503 UNAVAILABLE with Retry-After on every transport while PostgreSQL is unreachable, names it in /readyz, and recovers', async () => {
  expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready', down: [] } });
  expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);

  await relay.cut();

  const listed = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey, headers: { 'x-request-id': 'outage-rest' } });
  expect({ status: listed.status, code: listed.body.code, requestId: listed.body.requestId }).toEqual({ status: 503, code: 'UNAVAILABLE', requestId: 'outage-rest' });
  expect(listed.headers.get('x-request-id')).toBe('outage-rest');
  expect(Number(listed.headers.get('retry-after'))).toBeGreaterThan(0);
  // A write is refused the same way, before or after it reached a handler.
  const started = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram' } });
  expect({ status: started.status, code: started.body.code }).toEqual({ status: 503, code: 'UNAVAILABLE' });
  expect(started.headers.get('retry-after')).not.toBeNull();

  for (const name of ['grpc', 'connect', 'grpc-web'] as const) {
    expect(await rpcRefusal(name, `outage-${name}`)).toEqual({ code: 'Unavailable', reason: 'UNAVAILABLE', requestId: `outage-${name}` });
  }

  expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 503, body: { status: 'unavailable', down: ['database'] } });
  const health = createClient(Health, createGrpcTransport({ baseUrl: t.url }));
  expect((await health.check({ service: '' })).status).toBe(ServingStatus.NOT_SERVING);

  await relay.open();

  expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready', down: [] } });
  expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);
  expect(await rpcRefusal('grpc', 'after-outage')).toEqual({ code: 'OK', reason: undefined, requestId: null });
});
