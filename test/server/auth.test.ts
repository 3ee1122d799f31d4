import { createHash } from 'node:crypto';
import { Code, ConnectError, createClient, type Interceptor } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { ErrorInfoSchema } from '../../src/gen/google/rpc/error_details_pb';
import { ApiKeySchema, ConnectionSchema } from '../../src/db';
import { revokeApiKey } from '../../src/auth';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest, type TransportName } from '../support/clients';
import { connectSandboxAccount } from '../support/connections';
import { within } from '../support/within';

const RPC_TRANSPORTS: TransportName[] = ['grpc', 'connect', 'grpc-web'];

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

interface Failure {
  code: Code;
  reason: string | undefined;
  metadata: Record<string, string>;
}

async function failureOf(call: Promise<unknown>): Promise<Failure> {
  try {
    await call;
  } catch (error) {
    const connectError = ConnectError.from(error);
    const [info] = connectError.findDetails(ErrorInfoSchema);
    return { code: connectError.code, reason: info?.reason, metadata: info?.metadata ?? {} };
  }
  throw new Error('the call succeeded but a failure was expected');
}

/** A gRPC or Connect client that sends exactly this Authorization value. */
function clientWithAuthorization<T extends Parameters<typeof createClient>[0]>(service: T, kind: 'grpc' | 'connect', authorization: string) {
  const interceptors: Interceptor[] = [
    (next) => async (req) => {
      req.header.set('authorization', authorization);
      return next(req);
    },
  ];
  const transport =
    kind === 'grpc' ? createGrpcTransport({ baseUrl: t.url, interceptors }) : createConnectTransport({ baseUrl: t.url, httpVersion: '1.1', interceptors });
  return createClient(service, transport);
}

describe('authentication', () => {
  const UNKNOWN_KEY = `pk_live_${'A'.repeat(43)}`;
  const cases: { name: string; authorization: string | null; code: string }[] = [
    { name: 'no Authorization header', authorization: null, code: 'AUTHENTICATION_REQUIRED' },
    { name: 'a Basic credential', authorization: 'Basic x', code: 'API_KEY_INVALID' },
    { name: 'a Bearer scheme without a key', authorization: 'Bearer', code: 'API_KEY_INVALID' },
    { name: 'a Bearer token that is not an API key', authorization: 'Bearer not-a-key', code: 'API_KEY_INVALID' },
    { name: 'an unknown API key', authorization: `Bearer ${UNKNOWN_KEY}`, code: 'API_KEY_INVALID' },
  ];

  it.each(cases)('refuses $name with 401 $code on REST', async ({ authorization, code }) => {
    const response = await rest(t.url, 'GET', '/api/v1/connections', { headers: authorization === null ? {} : { authorization } });
    expect({ status: response.status, code: response.body.code }).toEqual({ status: 401, code });
    expect(response.body.message).toEqual(expect.any(String));
    expect(response.headers.get('x-request-id')).toEqual(expect.any(String));
  });

  it.each(cases)('refuses $name with Unauthenticated $code on gRPC and Connect', async ({ authorization, code }) => {
    for (const kind of ['grpc', 'connect'] as const) {
      const connections =
        authorization === null ? client(ConnectionService, t.url, kind) : clientWithAuthorization(ConnectionService, kind, authorization);
      const failure = await failureOf(connections.listConnections({}));
      expect({ kind, code: failure.code, reason: failure.reason }).toEqual({ kind, code: Code.Unauthenticated, reason: code });
    }
  });

  it('refuses a revoked key with 401 API_KEY_REVOKED on every transport', async () => {
    const tenant = await t.tenant();
    expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);
    expect(await revokeApiKey(t.orm.em.fork(), tenant.keyId)).toBe(true);

    // The service kept the key; the revocation reaches it as a PostgreSQL notice, within
    // milliseconds of the commit (its cache would keep the key for 30 s).
    const refusedSoon = await within(2_000, async () => (await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status === 401);
    expect(refusedSoon).toBe(true);
    const response = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    expect({ status: response.status, code: response.body.code }).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(ConnectionService, t.url, name, tenant.apiKey).listConnections({}));
      expect({ name, code: failure.code, reason: failure.reason }).toEqual({ name, code: Code.Unauthenticated, reason: 'API_KEY_REVOKED' });
    }
  });

  it('stores keys only as a hash', async () => {
    const tenant = await t.tenant();
    const row = await t.orm.em.fork().findOneOrFail(ApiKeySchema, { id: tenant.keyId });
    expect(row.keyHash).toBe(createHash('sha256').update(tenant.apiKey).digest('hex'));
    expect(JSON.stringify(row)).not.toContain(tenant.apiKey);
  });

  it('records when a key was last used', async () => {
    const tenant = await t.tenant();
    const lastUsed = async () => (await t.orm.em.fork().findOneOrFail(ApiKeySchema, { id: tenant.keyId })).lastUsedAt ?? null;
    expect(await lastUsed()).toBeNull();

    const before = Date.now();
    expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);
    const first = await lastUsed();
    expect(first).toBeInstanceOf(Date);
    expect(first!.getTime()).toBeGreaterThanOrEqual(before - 1000);
    expect(first!.getTime()).toBeLessThanOrEqual(Date.now() + 1000);

    // Within a minute a busy key is not rewritten on every call.
    await client(ConnectionService, t.url, 'grpc', tenant.apiKey).listConnections({});
    expect((await lastUsed())?.getTime()).toBe(first!.getTime());
  });

  it('does not record use of a revoked key', async () => {
    const tenant = await t.tenant();
    await revokeApiKey(t.orm.em.fork(), tenant.keyId);
    await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    const row = await t.orm.em.fork().findOneOrFail(ApiKeySchema, { id: tenant.keyId });
    expect(row.lastUsedAt ?? null).toBeNull();
  });
});

describe('scopes and roles', () => {
  it('refuses a key without webhooks:write with 403 SCOPE_MISSING naming the scope', async () => {
    const tenant = await t.tenant({ role: 'owner', scopes: ['connections:read', 'connections:manage'] });

    const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect(list).toMatchObject({ status: 403, body: { code: 'SCOPE_MISSING', details: { scope: 'webhooks:write' } } });
    expect(list.body.message).toContain('webhooks:write');
    const create = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://example.com/hook' } });
    expect(create).toMatchObject({ status: 403, body: { code: 'SCOPE_MISSING', details: { scope: 'webhooks:write' } } });

    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(WebhookService, t.url, name, tenant.apiKey).listWebhooks({}));
      expect({ name, ...failure }).toEqual({ name, code: Code.PermissionDenied, reason: 'SCOPE_MISSING', metadata: { scope: 'webhooks:write' } });
    }
  });

  it.each(['viewer', 'member'] as const)('refuses a %s with the webhooks:write scope with 403 PERMISSION_DENIED', async (role) => {
    const tenant = await t.tenant({ role, scopes: ['webhooks:write', 'connections:read'] });

    const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect(list).toMatchObject({ status: 403, body: { code: 'PERMISSION_DENIED', details: { permission: 'webhooks:write', role } } });
    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(WebhookService, t.url, name, tenant.apiKey).listWebhooks({}));
      expect({ name, ...failure }).toEqual({ name, code: Code.PermissionDenied, reason: 'PERMISSION_DENIED', metadata: { permission: 'webhooks:write', role } });
    }
  });

  it('lets an admin with the webhooks:write scope past authorization', async () => {
    const tenant = await t.tenant({ role: 'admin', scopes: ['webhooks:write'] });
    const list = await rest(t.url, 'GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
    expect([401, 403]).not.toContain(list.status);
    expect(['SCOPE_MISSING', 'PERMISSION_DENIED', 'AUTHENTICATION_REQUIRED', 'API_KEY_INVALID']).not.toContain(list.body?.code);
  });

  it('refuses a viewer with the connections:manage scope with 403 PERMISSION_DENIED', async () => {
    const tenant = await t.tenant({ role: 'viewer', scopes: ['connections:read', 'connections:manage'] });
    const start = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram' } });
    expect(start).toMatchObject({ status: 403, body: { code: 'PERMISSION_DENIED', details: { permission: 'connections:manage', role: 'viewer' } } });
    // Reading is granted to viewers.
    expect((await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey })).status).toBe(200);
  });

  it('lets a member with connections:manage start a connection', async () => {
    const tenant = await t.tenant({ role: 'member', scopes: ['connections:manage'] });
    const start = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram' } });
    expect(start.status).toBe(200);
    expect(start.body.redirectUrl).toEqual(expect.stringMatching(/^http/));
  });

  it('refuses listing connections to a key without connections:read', async () => {
    const tenant = await t.tenant({ role: 'owner', scopes: ['webhooks:write'] });
    const list = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    expect(list).toMatchObject({ status: 403, body: { code: 'SCOPE_MISSING', details: { scope: 'connections:read' } } });
  });
});

describe('organizations are isolated', () => {
  let mine: Tenant;
  let theirs: Tenant;
  let foreignId: string;
  beforeAll(async () => {
    mine = await t.tenant();
    theirs = await t.tenant();
    await connectSandboxAccount(t.url, mine.apiKey, 'linkedin', 'member');
    foreignId = (await connectSandboxAccount(t.url, theirs.apiKey, 'linkedin', 'member2')).id;
  });

  it("lists only the organization's own connections on every transport", async () => {
    const viaRest = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: mine.apiKey });
    expect(viaRest.status).toBe(200);
    expect(viaRest.body.connections.map((c: { identity: { handle: string } }) => c.identity.handle)).toEqual(['sam-sandbox']);
    expect(viaRest.body.connections.map((c: { id: string }) => c.id)).not.toContain(foreignId);

    for (const name of RPC_TRANSPORTS) {
      const { connections } = await client(ConnectionService, t.url, name, mine.apiKey).listConnections({});
      expect({ name, handles: connections.map((c) => c.identity?.handle) }).toEqual({ name, handles: ['sam-sandbox'] });
    }
  });

  it("refuses to confirm or disable another organization's connection with 404 CONNECTION_NOT_FOUND", async () => {
    const em = t.orm.em.fork();
    const before = await em.findOneOrFail(ConnectionSchema, { id: foreignId });
    const snapshot = { status: before.status, verifiedAt: before.verifiedAt, disableReason: before.disableReason, updatedAt: before.updatedAt };
    expect(snapshot.status).toBe('connected');

    const confirm = await rest(t.url, 'POST', `/api/v1/connections/${foreignId}/confirm`, { apiKey: mine.apiKey, body: { confirmIdentity: true } });
    expect(confirm).toMatchObject({ status: 404, body: { code: 'CONNECTION_NOT_FOUND' } });
    const disable = await rest(t.url, 'POST', `/api/v1/connections/${foreignId}/disable`, { apiKey: mine.apiKey, body: { reason: 'not ours' } });
    expect(disable).toMatchObject({ status: 404, body: { code: 'CONNECTION_NOT_FOUND' } });

    for (const name of RPC_TRANSPORTS) {
      const connections = client(ConnectionService, t.url, name, mine.apiKey);
      const confirmed = await failureOf(connections.confirmConnection({ id: foreignId, confirmIdentity: true }));
      const disabled = await failureOf(connections.disableConnection({ id: foreignId, reason: 'not ours' }));
      expect({ name, confirmed: [confirmed.code, confirmed.reason], disabled: [disabled.code, disabled.reason] }).toEqual({
        name,
        confirmed: [Code.NotFound, 'CONNECTION_NOT_FOUND'],
        disabled: [Code.NotFound, 'CONNECTION_NOT_FOUND'],
      });
    }

    const after = await t.orm.em.fork().findOneOrFail(ConnectionSchema, { id: foreignId });
    expect({ status: after.status, verifiedAt: after.verifiedAt, disableReason: after.disableReason, updatedAt: after.updatedAt }).toEqual(snapshot);
  });

  it('refuses to reconnect another organization\'s connection with 404 CONNECTION_NOT_FOUND', async () => {
    const start = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: mine.apiKey, body: { toolkit: 'linkedin', connectionId: foreignId } });
    expect(start).toMatchObject({ status: 404, body: { code: 'CONNECTION_NOT_FOUND' } });
  });
});

describe('the operator service', () => {
  it('refuses a customer key with OPERATOR_CREDENTIAL_REQUIRED', async () => {
    const tenant = await t.tenant({ role: 'owner' });
    for (const name of RPC_TRANSPORTS) {
      const failure = await failureOf(client(OperatorService, t.url, name, tenant.apiKey).getKillSwitch({}));
      expect({ name, code: failure.code, reason: failure.reason }).toEqual({ name, code: Code.Unauthenticated, reason: 'OPERATOR_CREDENTIAL_REQUIRED' });
    }
    const noKey = await failureOf(client(OperatorService, t.url, 'grpc').getKillSwitch({}));
    expect(noKey.reason).toBe('OPERATOR_CREDENTIAL_REQUIRED');
  });

  it('lets the operator credential past authentication', async () => {
    const operator = client(OperatorService, t.url, 'grpc', t.config.operatorToken);
    const outcome = await operator.getKillSwitch({}).then(
      () => null,
      (error: unknown) => ConnectError.from(error),
    );
    expect(outcome?.code).not.toBe(Code.Unauthenticated);
    expect(outcome?.code).not.toBe(Code.PermissionDenied);
  });

  it('is not reachable under /api/v1', async () => {
    const tenant = await t.tenant({ role: 'owner' });
    for (const apiKey of [tenant.apiKey, t.config.operatorToken]) {
      const paths = [
        `/api/v1/${OperatorService.typeName}/GetKillSwitch`,
        '/api/v1/operator/kill-switch',
        '/api/v1/kill-switch',
        '/api/v1/audit-events',
        '/api/v1/dead-letters',
      ];
      for (const path of paths) {
        for (const method of ['GET', 'POST']) {
          const response = await rest(t.url, method, path, { apiKey, body: method === 'POST' ? {} : undefined });
          expect({ path, method, status: response.status, code: response.body?.code }).toEqual({ path, method, status: 404, code: 'ROUTE_NOT_FOUND' });
        }
      }
    }
  });
});
