/**
 * Figure 3: GET /api/v1/connections (REST gateway) ÷ the same RPC as Connect JSON on the same
 * server. Goal: overhead = 1 − ratio ≤ 10%.
 * Figure 4 (information): gRPC ListConnections calls/s (one HTTP/2 session, 16 loops) ÷ a
 * bare connect-node h2c server answering the same method with the service's own answer.
 */
import { startChild, startLoad, type Child } from '../lib';
import { CONNECTIONS, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addFigure, addThroughputFigure, diagnostics, failedFigure, fmtMs, httpLoad, loadSide, log, requireClean, rounds, throughputRatios, withLoads } from '../harness';
import { LISTED_CONNECTIONS, api, expectOk, type Context } from '../context';

const CONNECT_PATH = '/publishing.v1.ConnectionService/ListConnections';

export async function benchGateway(ctx: Context): Promise<void> {
  const name = '  information: GET /api/v1/connections ÷ Connect JSON ListConnections';
  const overheadName = 'REST gateway overhead (1 − ratio)';
  const tenant = ctx.tenants.conn!;
  const base = ctx.server.ready.url;
  try {
    const rest = await expectOk(api(base, 'GET', '/api/v1/connections', tenant.apiKey), 'REST list connections');
    const connect = await expectOk(api(base, 'POST', CONNECT_PATH, tenant.apiKey, '{}'), 'Connect list connections');
    if (JSON.stringify(rest) !== JSON.stringify(connect)) throw new Error('REST and Connect answers differ');
    if ((rest.connections as unknown[]).length !== LISTED_CONNECTIONS) throw new Error(`expected ${LISTED_CONNECTIONS} connections`);
    log(`rest_gateway: ${CONNECTIONS} connections each, ${PAIRS} pairs × ${SEGMENT_SECONDS} s; answer ${JSON.stringify(rest).length} bytes`);
    const auth = { authorization: `Bearer ${tenant.apiKey}` };
    const measured = await withLoads(
      [
        httpLoad({ url: `${base}/api/v1/connections`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, headers: auth }),
        httpLoad({ url: `${base}${CONNECT_PATH}`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{}' }),
      ],
      ([r, c]) => rounds([loadSide('REST gateway', r!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid), loadSide('Connect JSON', c!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid)]),
    );
    const [a, b] = measured.summaries;
    requireClean(a!, 'REST gateway');
    requireClean(b!, 'Connect JSON');
    diagnostics.push(
      `REST gateway: server ${fmtMs(a!.cpuMsPerOp)} CPU per request via REST, ${fmtMs(b!.cpuMsPerOp)} via Connect JSON ` +
        `(CPU overhead ${(((a!.cpuMsPerOp ?? NaN) / (b!.cpuMsPerOp ?? NaN) - 1) * 100).toFixed(1)}%)`,
    );
    addThroughputFigure({ id: 'rest_gateway_ratio', figure: name, unit: 'req/s', baselineUnit: 'req/s', measured, detail: { rest: a, connect: b, connections: CONNECTIONS } });
    addFigure({
      id: 'rest_gateway_overhead',
      figure: overheadName,
      ratios: throughputRatios(measured).map((r) => 1 - r),
      ratioLabel: 'overhead',
      goal: '≤ 10%',
      check: (r) => r <= 0.1,
      loadAverage: measured.loadAverage,
    });
  } catch (error) {
    failedFigure('rest_gateway_overhead', overheadName, '≤ 10%', error);
  }
}

export async function benchGrpc(ctx: Context): Promise<void> {
  const id = 'grpc_unary';
  const name = '  information: gRPC ListConnections ÷ bare connect-node server';
  let bare: Child<{ url: string }> | null = null;
  try {
    const tenant = ctx.tenants.conn!;
    const responseJson = await expectOk(api(ctx.server.ready.url, 'POST', CONNECT_PATH, tenant.apiKey, '{}'), 'Connect list connections');
    bare = await startChild<{ url: string }>('bare-grpc.ts', { responseJson });
    log(`${id}: ${CONNECTIONS} concurrent calls on one HTTP/2 session each, ${PAIRS} pairs × ${SEGMENT_SECONDS} s`);
    const grpcLoad = (baseUrl: string) => () => startLoad('load-grpc.ts', { baseUrl, apiKey: tenant.apiKey, loops: CONNECTIONS, warmupSeconds: WARMUP_SECONDS });
    const barePid = bare.proc.pid;
    const measured = await withLoads([grpcLoad(ctx.server.ready.url), grpcLoad(bare.ready.url)], ([s, r]) =>
      rounds([
        loadSide('service (calls)', s!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, ctx.server.proc.pid),
        loadSide('bare connect-node (calls)', r!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, barePid),
      ]),
    );
    const [a, b] = measured.summaries;
    requireClean(a!, 'gRPC service');
    requireClean(b!, 'bare gRPC');
    diagnostics.push(
      `gRPC: service ${fmtMs(a!.cpuMsPerOp)} CPU per call, ${a!.cores?.toFixed(2)} cores busy, p50 ${fmtMs(a!.latency?.p50)} per call with ${CONNECTIONS} in flight; ` +
        `bare server ${fmtMs(b!.cpuMsPerOp)} per call, ${b!.cores?.toFixed(2)} cores, p50 ${fmtMs(b!.latency?.p50)}`,
    );
    addThroughputFigure({ id, figure: name, unit: 'calls/s', baselineUnit: 'calls/s', measured, detail: { service: { ...a, latency: a!.latency }, bare: b, loops: CONNECTIONS } });
  } catch (error) {
    failedFigure(id, name, '—', error);
  } finally {
    await bare?.stop(5000);
  }
}
