import { randomBytes } from 'node:crypto';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from '../../src/gen/grpc/health/v1/health_pb';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/config/logger';
import { openDatabase, migrate, type MikroORM, databaseAt } from '../../src/db';
import { start, type App } from '../../src/server';
import { startTestApp, TEST_ENV, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { createTestDatabase, databaseUrl, withAdmin } from '../support/databases';

const CORE_TABLES = [
  'organizations',
  'users',
  'api_keys',
  'connections',
  'connection_attempts',
  'posts',
  'webhook_endpoints',
  'webhook_deliveries',
  'delivery_attempts',
  'dead_letters',
  'audit_events',
  'kill_switches',
];

describe('migrations', () => {
  const name = `publishing_test_empty_${randomBytes(6).toString('hex')}`;
  let orm: MikroORM | undefined;
  beforeAll(async () => {
    await withAdmin(async (admin) => void (await admin.query(`create database ${name}`)));
  });
  afterAll(async () => {
    await orm?.close();
    await withAdmin(async (admin) => void (await admin.query(`drop database if exists ${name} with (force)`)));
  });

  async function tablesOf(db: MikroORM): Promise<string[]> {
    const rows = await db.em.fork().execute<{ table_name: string }[]>(
      `select table_name from information_schema.tables where table_schema = 'public' order by table_name`,
    );
    return rows.map((r) => r.table_name);
  }

  it('apply on an empty database, record themselves, and apply nothing the second time', async () => {
    orm = await openDatabase(databaseAt(databaseUrl(name)), { pool: { min: 0, max: 2 } });
    expect(await tablesOf(orm)).toEqual([]);

    const applied = await migrate(orm);
    expect(applied).toContain('Migration20261121000000Initial');

    const tables = await tablesOf(orm);
    expect(tables).toEqual(expect.arrayContaining([...CORE_TABLES, 'schema_migrations']));
    const recorded = await orm.em.fork().execute<{ name: string }[]>('select name from schema_migrations order by id');
    expect(recorded.map((r) => r.name)).toEqual(applied);

    expect(await migrate(orm)).toEqual([]);
    const recordedAgain = await orm.em.fork().execute<{ name: string }[]>('select name from schema_migrations order by id');
    expect(recordedAgain).toHaveLength(applied.length);
  });

  it('leave a schema that refuses changes to the audit trail', async () => {
    orm ??= await openDatabase(databaseAt(databaseUrl(name)), { pool: { min: 0, max: 2 } });
    const db = orm;
    await migrate(db);
    const em = db.em.fork();
    await em.execute(`insert into audit_events (action, outcome) values ('connection.start', 'succeeded')`);
    await expect(em.execute(`update audit_events set outcome = 'refused'`)).rejects.toThrow(/append-only/);
    await expect(em.execute('delete from audit_events')).rejects.toThrow(/append-only/);
    await expect(em.execute('truncate audit_events')).rejects.toThrow(/append-only/);
    expect(await em.execute('select outcome from audit_events')).toEqual([{ outcome: 'succeeded' }]);
  });
});

describe('health', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('answers /healthz and /readyz with 200 without a key', async () => {
    expect(await rest(t.url, 'GET', '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  });

  it('answers the gRPC health check with SERVING for the server and each service, without a key', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.url }));
    expect((await health.check({ service: '' })).status).toBe(ServingStatus.SERVING);
    expect((await health.check({ service: ConnectionService.typeName })).status).toBe(ServingStatus.SERVING);
    await expect(health.check({ service: 'no.such.Service' })).rejects.toMatchObject({ code: 5 });
  });
});

describe('health when the database is gone', () => {
  let app: App;
  let orm: MikroORM;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    database = await createTestDatabase();
    orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 2 } });
    app = await start({ config: loadConfig({ ...TEST_ENV, DATABASE_URL: database.url }), orm, logger: createLogger('silent') });
  });
  afterAll(async () => {
    await app.close();
    await orm.close().catch(() => undefined);
    await database.drop();
  });

  it('stays live but reports not ready and NOT_SERVING', async () => {
    expect((await rest(app.url, 'GET', '/readyz')).status).toBe(200);
    await database.drop();

    expect(await rest(app.url, 'GET', '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await rest(app.url, 'GET', '/readyz')).toMatchObject({ status: 503 });
    const health = createClient(Health, createGrpcTransport({ baseUrl: app.url }));
    expect((await health.check({ service: '' })).status).toBe(ServingStatus.NOT_SERVING);
  });
});
