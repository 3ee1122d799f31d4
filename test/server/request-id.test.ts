import { ConnectError } from '@connectrpc/connect';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t.close());

describe('request ids', () => {
  it("keep the caller's x-request-id on REST, for answers and refusals alike", async () => {
    const tenant = await t.tenant();
    const ok = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey, headers: { 'x-request-id': 'trace-42.a' } });
    expect(ok.headers.get('x-request-id')).toBe('trace-42.a');
    const refused = await rest(t.url, 'POST', '/api/v1/connections/start', {
      apiKey: tenant.apiKey,
      body: { toolkit: 'tiktok' },
      headers: { 'x-request-id': 'trace-43' },
    });
    expect(refused.status).toBe(422);
    expect(refused.body.requestId).toBe('trace-43');
    expect(refused.headers.get('x-request-id')).toBe('trace-43');
  });

  it('replace an id that is not a sane token, the same way on REST and gRPC', async () => {
    const tenant = await t.tenant();
    const res = await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey, headers: { 'x-request-id': 'a b<script>' } });
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const grpc = client(ConnectionService, t.url, 'grpc', tenant.apiKey);
    const error = await grpc.startConnection({ toolkit: 'tiktok' }, { headers: { 'x-request-id': 'trace-44' } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).metadata.get('x-request-id')).toBe('trace-44');
  });
});
