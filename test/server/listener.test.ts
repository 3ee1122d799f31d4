import http2 from 'node:http2';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { Health, HealthCheckResponse_ServingStatus } from '../../src/gen/grpc/health/v1/health_pb';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t.close();
});

describe('one listener for every protocol', () => {
  it('answers /healthz and /readyz over HTTP/1.1', async () => {
    expect(await rest(t.url, 'GET', '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } });
    expect(await rest(t.url, 'GET', '/readyz')).toMatchObject({ status: 200, body: { status: 'ready' } });
  });

  it('answers the standard gRPC health check over h2c on the same port', async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.url }));
    expect((await health.check({ service: '' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: 'publishing.v1.WebhookService' })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    await expect(health.check({ service: 'nope.Service' })).rejects.toMatchObject({ code: 5 });
  });

  it('serves REST over HTTP/2 cleartext as well', async () => {
    const session = http2.connect(t.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = session.request({ ':path': '/healthz' });
      req.on('response', (headers) => resolve(Number(headers[':status'])));
      req.on('error', reject);
      req.end();
    });
    session.close();
    expect(status).toBe(200);
  });
});
