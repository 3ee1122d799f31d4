import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';
import { RestGateway } from '../../src/server/rest/gateway';

describe('the REST gateway over an RPC that is not built yet', () => {
  it('answers 501 NOT_IMPLEMENTED with a code, derived from the descriptor alone', async () => {
    const gateway = new RestGateway({
      routes: (router) => router.service(ConnectionService, {}),
      routerOptions: {},
      services: [ConnectionService.typeName],
      maxBodyBytes: 1024,
    });
    expect(gateway.describe().map((r) => `${r.verb} ${r.template}`)).toContain('POST /api/v1/connections/{id}/confirm');
    const server = http.createServer((req, res) => void gateway.handle(req, res, 'req-1'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/connections/abc/confirm`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"confirmIdentity":true}',
      });
      expect(res.status).toBe(501);
      expect(await res.json()).toMatchObject({ code: 'NOT_IMPLEMENTED', requestId: 'req-1' });
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
