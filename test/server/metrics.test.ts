import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { startTestApp, type TestApp } from '../support/app';
import { client, rest } from '../support/clients';
import { ConnectionService } from '../../src/gen/publishing/v1/connection_service_pb';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t.close());

function sample(text: string, name: string, labels: Record<string, string>): number | null {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (wanted.every((w) => line.includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return null;
}

describe('GET /metrics', () => {
  it('counts calls by procedure, transport and stable code, with latency histograms', async () => {
    const tenant = await t.tenant();
    await rest(t.url, 'GET', '/api/v1/connections', { apiKey: tenant.apiKey });
    await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'tiktok' } });
    await client(ConnectionService, t.url, 'grpc', tenant.apiKey).listConnections({});
    const res = await fetch(`${t.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    const list = 'publishing.v1.ConnectionService/ListConnections';
    expect(sample(text, 'rpc_requests_total', { procedure: list, transport: 'rest', code: 'OK' })).toBe(1);
    expect(sample(text, 'rpc_requests_total', { procedure: list, transport: 'grpc', code: 'OK' })).toBe(1);
    expect(
      sample(text, 'rpc_requests_total', { procedure: 'publishing.v1.ConnectionService/StartConnection', transport: 'rest', code: 'CAPABILITY_UNSUPPORTED' }),
    ).toBe(1);
    expect(sample(text, 'rpc_request_duration_seconds_count', { procedure: list, transport: 'rest' })).toBe(1);
    expect(sample(text, 'webhook_delivery_lag_seconds', {})).toBe(0);
    expect(sample(text, 'webhook_dead_letters', {})).toBe(0);
  });

  it('shows the kill switch state', async () => {
    const operator = createClient(
      OperatorService,
      createGrpcTransport({
        baseUrl: t.url,
        interceptors: [(next) => async (req) => (req.header.set('authorization', `Bearer ${t.config.operatorToken}`), next(req))],
      }),
    );
    await operator.setKillSwitch({ enabled: true, reason: 'incident drill' });
    const text = await (await fetch(`${t.url}/metrics`)).text();
    expect(sample(text, 'webhook_kill_switch_enabled', { scope: 'global' })).toBe(1);
    await operator.setKillSwitch({ enabled: false });
    const after = await (await fetch(`${t.url}/metrics`)).text();
    expect(sample(after, 'webhook_kill_switch_enabled', { scope: 'global' })).toBe(0);
  });
});
