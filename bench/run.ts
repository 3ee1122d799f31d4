/**
 * `npm run bench`: performance figures of the service, each a RATIO to a baseline
 * measured in the same run on the same machine (timings on a shared 2-core machine are
 * noisy; ratios much less so). See bench/README.md for what each figure means.
 *
 * The service runs in a child process (bench/server.ts); load comes from other child
 * processes (autocannon, pg, gRPC and HTTPS loops) that serve measured segments, so a
 * figure and its baseline alternate A B B A A B B A without process start-ups in between.
 * The run creates and drops its own database. Exit code: 0 when every figure was
 * measured (goals missed or not), 1 when a figure could not be measured, 2 when the time
 * budget ran out.
 */
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client, Pool } from 'pg';
import { makeTestTls, type TestTls } from '../test/support/tls';
import { ensureServiceRoles, openDatabase, migrate } from '../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../src/auth';
import { quotaRefusalOf } from '../src/webhooks';
import { baseEnv, killAllChildren, percentile, sleep, startChild, startLoad, withCpu, type Child, type Load } from './lib';
import type { Segment, SegmentCommand } from './child';
import type { HttpLoadInput } from './load-http';
import { serviceNodeFlags } from '../scripts/service-node-flags';

// ---------------------------------------------------------------------------------------
// Parameters

function numberEnv(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min) throw new Error(`${name} must be a number ≥ ${min} (got "${raw}")`);
  return value;
}

/** Seconds each side of a figure is measured for (throughput pairs: 4 segments of a quarter). */
const SECONDS = numberEnv('BENCH_SECONDS', 10, 1);
const SEGMENT_SECONDS = SECONDS / 4;
/** The order of the segments of a throughput pair: drift in the neighbours' load weighs on both sides. */
const PATTERN = 'ABBAABBA';
const CONNECTIONS = 16;
const WARMUP_SECONDS = Math.min(3, SECONDS / 3);
const DELIVERIES = Math.round(numberEnv('BENCH_DELIVERIES', 3000, 40));
const HISTORY_ROWS = Math.round(numberEnv('BENCH_HISTORY_ROWS', 1_000_000, 1000));
const MEMORY_SMALL = Math.round(numberEnv('BENCH_MEMORY_SMALL', 10_000, 100));
const MEMORY_LARGE = Math.round(numberEnv('BENCH_MEMORY_LARGE', 100_000, 200));
if (MEMORY_LARGE <= MEMORY_SMALL) throw new Error('BENCH_MEMORY_LARGE must be greater than BENCH_MEMORY_SMALL');
/** After the counted requests, the same mix for this long, then RSS once more: memory after sustained load, not after a count. */
const MEMORY_SECONDS = numberEnv('BENCH_MEMORY_SECONDS', 60, 1);
const BUDGET_SECONDS = numberEnv('BENCH_BUDGET_SECONDS', 600, 30);
/** Comma-separated benchmark ids to run (development): list_webhooks, create_webhooks, rest_gateway, grpc_unary, delivery_engine, delivery_engine_1000, publish_latency, publish_fan_out, memory_growth. */
const ONLY = process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(',').map((s) => s.trim()) : null;
/**
 * Node arguments of the service processes: the flags the service runs with (package.json
 * `config.serviceNodeFlags`), then any extra ones (development: `--cpu-prof --cpu-prof-dir=/tmp/prof`).
 */
const SERVER_NODE_ARGS = [
  ...serviceNodeFlags(path.resolve(__dirname, '..')),
  ...(process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean),
];
/** Development: keep publishing_bench after the run to look into it (the next run drops it). */
const KEEP_DATABASE = process.env.BENCH_KEEP_DATABASE === '1';
const ADMIN_URL =
  process.env.BENCH_DATABASE_ADMIN_URL ?? process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
/** The database the run creates and drops; another name lets two runs share one PostgreSQL. */
const DB_NAME = process.env.BENCH_DATABASE_NAME ?? 'publishing_bench';
if (!/^[a-z_][a-z0-9_]*$/.test(DB_NAME)) throw new Error(`BENCH_DATABASE_NAME must be a plain lowercase identifier (got ${DB_NAME}).`);
const LIST_ENDPOINTS = 50;
const OTHER_ORGS = 5;
const OTHER_ENDPOINTS_PER_ORG = 10;
const DELIVERY_ENDPOINTS = 16;
const LISTED_CONNECTIONS = 10;
/** Subscribed endpoints of the organization the fan-out figure publishes to. */
const FAN_OUT_ENDPOINTS = 100;
const INTERNAL_TOKEN = 'bench-internal-service-token-0123456789abcdef';

const started = Date.now();
const elapsed = () => (Date.now() - started) / 1000;
const log = (message: string) => process.stderr.write(`[bench ${elapsed().toFixed(0).padStart(3)}s] ${message}\n`);

function databaseUrlOf(name: string): string {
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return url.toString();
}
const DATABASE_URL = databaseUrlOf(DB_NAME);

// ---------------------------------------------------------------------------------------
// Results

interface Figure {
  id: string;
  figure: string;
  value: number | null;
  unit: string;
  baseline: number | null;
  baselineUnit: string;
  /** value ÷ baseline, or the derived figure the goal is about (overhead, growth). */
  ratio: number | null;
  ratioLabel: string;
  goal: string;
  /** null: no goal, or not measured. */
  pass: boolean | null;
  /** CPU per operation (ms) of the process doing the work on each side: the service, and the baseline's server or loop. */
  cpu?: { value: number | null; baseline: number | null };
  detail: Record<string, unknown>;
  error?: string;
}

const figures: Figure[] = [];
const errors: string[] = [];
/** One line per figure on where the time goes (CPU per operation, answer sizes, trajectories). */
const diagnostics: string[] = [];

const fmtMs = (value: number | null | undefined) => (value == null ? '?' : `${value.toFixed(2)} ms`);

function addFigure(figure: Omit<Figure, 'pass'> & { check?: (ratio: number) => boolean }): void {
  const { check, ...rest } = figure;
  figures.push({ ...rest, pass: check && rest.ratio !== null && Number.isFinite(rest.ratio) ? check(rest.ratio) : null });
}

function failedFigure(id: string, figure: string, goal: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  errors.push(`${id}: ${message}`);
  log(`${id}: ERROR ${message}`);
  figures.push({ id, figure, value: null, unit: '', baseline: null, baselineUnit: '', ratio: null, ratioLabel: '', goal, pass: null, detail: {}, error: message.split('\n')[0]!.slice(0, 200) });
}

// ---------------------------------------------------------------------------------------
// Database and HTTP helpers

async function admin<T>(fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function api(
  baseUrl: string,
  method: string,
  pathName: string,
  apiKey: string,
  body?: unknown,
): Promise<{ status: number; json: any; text: string }> {
  const response = await fetch(`${baseUrl}${pathName}`, {
    method,
    headers: { authorization: `Bearer ${apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await response.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // not JSON; the caller looks at text
  }
  return { status: response.status, json, text };
}

async function expectOk(call: Promise<{ status: number; json: any; text: string }>, what: string): Promise<any> {
  const { status, json, text } = await call;
  if (status !== 200) throw new Error(`${what}: HTTP ${status} ${text.slice(0, 300)}`);
  return json;
}

/** Reads metric values from the Prometheus text of /metrics. */
async function scrapeMetrics(baseUrl: string, names: string[]): Promise<number[]> {
  const response = await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(30_000) });
  const lines = (await response.text()).split('\n');
  return names.map((name) => {
    const line = lines.find((l) => l.startsWith(`${name} `));
    if (!line) throw new Error(`/metrics has no ${name}`);
    return Number(line.slice(name.length + 1).trim());
  });
}

// ---------------------------------------------------------------------------------------
// Measuring

/** One measured segment; `cpuSeconds` is the working process's (the service, a reference server or loop). */
type Measured = Omit<Segment, 'cpuSeconds'> & { cpuSeconds: number | null };

interface Summary {
  ok: number;
  errors: number;
  non2xx: number;
  seconds: number;
  /** Successful operations per second over all segments. */
  rps: number;
  /** Per segment, in order. */
  segments: number[];
  /** CPU of the working process per operation (null when not measured). */
  cpuMsPerOp: number | null;
  /** Cores the working process kept busy (CPU seconds ÷ wall seconds). */
  cores: number | null;
  latency: { count: number; p50: number; p99: number; mean: number } | null;
  statusCodes: Record<string, number>;
  firstError: string | null;
}

interface Side {
  label: string;
  segment(): Promise<Measured>;
}

function summarize(parts: Measured[]): Summary {
  const sum = (f: (m: Measured) => number) => parts.reduce((a, m) => a + f(m), 0);
  const ok = sum((m) => m.ok);
  const errors = sum((m) => m.errors);
  const non2xx = sum((m) => m.non2xx);
  const seconds = sum((m) => m.seconds);
  const cpu = parts.every((m) => m.cpuSeconds !== null) ? sum((m) => m.cpuSeconds!) : null;
  const latencies = parts.flatMap((m) => m.latencies ?? []).sort((a, b) => a - b);
  const statusCodes: Record<string, number> = {};
  for (const m of parts) for (const [code, n] of Object.entries(m.statusCodes ?? {})) statusCodes[code] = (statusCodes[code] ?? 0) + n;
  return {
    ok,
    errors,
    non2xx,
    seconds,
    rps: seconds > 0 ? ok / seconds : 0,
    segments: parts.map((m) => Math.round((m.ok / m.seconds) * 10) / 10),
    cpuMsPerOp: cpu !== null && ok + errors + non2xx > 0 ? (cpu * 1000) / (ok + errors + non2xx) : null,
    cores: cpu !== null && seconds > 0 ? cpu / seconds : null,
    latency:
      latencies.length > 0
        ? { count: latencies.length, p50: percentile(latencies, 50), p99: percentile(latencies, 99), mean: latencies.reduce((a, b) => a + b, 0) / latencies.length }
        : null,
    statusCodes,
    firstError: parts.find((m) => m.firstError)?.firstError ?? null,
  };
}

function describe(m: Measured): string {
  const ops = m.ok + m.errors + m.non2xx;
  const cpu = m.cpuSeconds !== null && ops > 0 ? `, ${((m.cpuSeconds * 1000) / ops).toFixed(2)} ms CPU/op` : '';
  const bad = m.errors + m.non2xx > 0 ? `, ${m.non2xx} non-2xx, ${m.errors} errors` : '';
  return `${(m.ok / m.seconds).toFixed(1)}/s (${m.ok} in ${m.seconds.toFixed(2)} s${bad}${cpu})`;
}

/** Runs the sides' segments in PATTERN order (A B B A A B B A). */
async function interleave(a: Side, b: Side): Promise<{ a: Summary; b: Summary }> {
  const parts: { a: Measured[]; b: Measured[] } = { a: [], b: [] };
  for (const which of PATTERN) {
    const side = which === 'A' ? a : b;
    const measured = await side.segment();
    log(`  ${which} ${side.label}: ${describe(measured)}`);
    (which === 'A' ? parts.a : parts.b).push(measured);
  }
  return { a: summarize(parts.a), b: summarize(parts.b) };
}

/** A side driven by a load child; CPU is the `workerPid` process's when given, else the load child's own. */
function loadSide(label: string, load: Load, command: Omit<SegmentCommand, 'cmd'>, workerPid?: number): Side {
  return {
    label,
    async segment() {
      if (!workerPid) return load.run(command);
      const { result, cpuSeconds } = await withCpu(workerPid, () => load.run(command));
      return { ...result, cpuSeconds };
    },
  };
}

function requireClean(summary: Summary, what: string): void {
  const bad = summary.errors + summary.non2xx;
  if (summary.ok === 0 || bad > Math.max(5, 0.01 * (summary.ok + bad))) {
    throw new Error(`${what}: ${summary.ok} ok, ${summary.errors} errors, ${summary.non2xx} non-2xx${summary.firstError ? ` (${summary.firstError})` : ''}`);
  }
}

/** Starts load children, runs `fn`, and closes them whatever happens. */
async function withLoads<T>(starts: (() => Promise<Load>)[], fn: (loads: Load[]) => Promise<T>): Promise<T> {
  const loads: Load[] = [];
  try {
    for (const start of starts) loads.push(await start());
    return await fn(loads);
  } finally {
    await Promise.all(loads.map((l) => l.close()));
  }
}

const httpLoad = (spec: HttpLoadInput) => () => startLoad('load-http.ts', spec);

// ---------------------------------------------------------------------------------------
// Seeding

interface Tenant {
  organizationId: string;
  apiKey: string;
}

async function seedTenants(names: string[]): Promise<Record<string, Tenant>> {
  const orm = await openDatabase(DATABASE_URL, { pool: { min: 0, max: 2 } });
  try {
    const tenants: Record<string, Tenant> = {};
    for (const name of names) {
      const em = orm.em.fork();
      const org = await createOrganization(em, { name: `Bench ${name}`, plan: 'scale' });
      const user = await createUser(em, { organizationId: org.id, email: `owner-${name}@bench.example.com`, role: 'owner' });
      const key = await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'bench', scopes: [...PERMISSIONS] });
      tenants[name] = { organizationId: org.id, apiKey: key.key };
    }
    return tenants;
  } finally {
    await orm.close();
  }
}

/** Creates endpoints through the API (real sealed secrets), a few at a time. */
async function createEndpoints(baseUrl: string, tenant: Tenant, urls: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < urls.length; i += 8) {
    const batch = await Promise.all(
      urls.slice(i, i + 8).map((url) =>
        expectOk(api(baseUrl, 'POST', '/api/v1/webhooks', tenant.apiKey, { url, eventNames: ['webhook.test'] }), 'create endpoint'),
      ),
    );
    ids.push(...batch.map((r: { endpoint: { id: string } }) => r.endpoint.id));
  }
  return ids;
}

async function insertConnections(pool: Pool, organizationId: string, count: number): Promise<void> {
  await pool.query(
    `insert into connections (id, organization_id, toolkit, status, connected_account_ref, account_id, account_kind,
                               display_name, handle, avatar_url, confirmed_account_id, verified_at, created_at, updated_at)
     select gen_random_uuid(), $1::uuid, (array['instagram','facebook','linkedin','youtube'])[1 + g % 4], 'verified',
            'ca_bench_' || g, 'bench-' || $1::text || '-' || g, 'business', 'Bench account ' || g, '@bench' || g,
            'https://cdn.example.com/avatar/' || g || '.png', 'bench-' || $1::text || '-' || g, now(), now() - g * interval '1 minute', now()
       from generate_series(1, $2::int) g`,
    [organizationId, count],
  );
}

// ---------------------------------------------------------------------------------------
// The figures

interface Context {
  tls: TestTls;
  pool: Pool;
  server: Child<{ url: string }>;
  receiver: Child<{ url: string }>;
  tenants: Record<string, Tenant>;
  /** The 50 endpoints of the listed organization, and of its twin that never gets a history. */
  listEndpointIds: string[];
  twinEndpointIds: string[];
  otherEndpoints: { organizationId: string; id: string }[];
  deliveryEndpointIds: string[];
  serverEnv: Record<string, string>;
}

function writeCaFile(pem: string): string {
  const file = path.join(os.tmpdir(), `publishing-bench-ca-${process.pid}.pem`);
  fs.writeFileSync(file, pem);
  return file;
}

function serverEnvOf(tls: TestTls): Record<string, string> {
  return baseEnv({
    NODE_ENV: 'test',
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL,
    DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
    // Trusted the way production adds a CA: Node loads it into its default store once.
    NODE_EXTRA_CA_CERTS: writeCaFile(tls.caPem),
    LOG_LEVEL: 'silent',
    DELIVERY_POLL_INTERVAL_MS: '20',
    INTERNAL_SERVICE_TOKENS: `bench:${INTERNAL_TOKEN}`,
  });
}

// 1 -------------------------------------------------------------------------------------

/** The bare node:http + pg server (bare-rest.ts), knowing the API keys of the given tenants. */
function startBareRest(tenants: Tenant[]): Promise<Child<{ url: string }>> {
  return startChild<{ url: string }>('bare-rest.ts', {
    databaseUrl: DATABASE_URL,
    organizations: Object.fromEntries(tenants.map((t) => [t.apiKey, t.organizationId])),
  });
}

/** A figure "service ÷ bare node:http + pg server" from a throughput pair. */
function addBareFigure(id: string, figure: string, service: Summary, bare: Summary, detail: Record<string, unknown>): void {
  addFigure({
    id,
    figure,
    value: service.rps,
    unit: 'req/s',
    baseline: bare.rps,
    baselineUnit: 'req/s',
    ratio: service.rps / bare.rps,
    ratioLabel: 'ratio',
    goal: '≥ 0.5',
    check: (r) => r >= 0.5,
    cpu: { value: service.cpuMsPerOp, baseline: bare.cpuMsPerOp },
    detail: { service, bare, ...detail },
  });
}

async function benchCreateWebhooks(ctx: Context): Promise<void> {
  const id = 'create_webhooks';
  const name = 'POST /api/v1/webhooks throughput ÷ raw pg insert loop';
  const bareName = '  POST /api/v1/webhooks throughput ÷ bare node:http + pg server';
  let bare: Child<{ url: string }> | null = null;
  try {
    const tenant = ctx.tenants.write!;
    const url = 'https://127.0.0.1:8443/bench/create';
    bare = await startBareRest([tenant]);
    log(`${id}: ${CONNECTIONS} connections vs ${CONNECTIONS} pg clients, then vs the bare server, ${PATTERN} × ${SEGMENT_SECONDS} s each`);
    const createLoad = (base: string) =>
      httpLoad({
        url: `${base}/api/v1/webhooks`,
        connections: CONNECTIONS,
        warmupSeconds: WARMUP_SECONDS,
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url, eventNames: ['webhook.test'] }),
      });
    const barePid = bare.proc.pid;
    const { a, b, c, d } = await withLoads(
      [
        createLoad(ctx.server.ready.url),
        () => startLoad('load-pg.ts', { databaseUrl: DATABASE_URL, organizationId: tenant.organizationId, url, workers: CONNECTIONS, warmupSeconds: WARMUP_SECONDS }),
        createLoad(bare.ready.url),
      ],
      async ([service, pg, bareLoad]) => {
        const serviceSide = loadSide('service (req)', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid);
        const { a, b } = await interleave(serviceSide, loadSide('raw pg (tx)', pg!, { seconds: SEGMENT_SECONDS }));
        const { a: c, b: d } = await interleave(serviceSide, loadSide('bare server (req)', bareLoad!, { seconds: SEGMENT_SECONDS }, barePid));
        return { a, b, c, d };
      },
    );
    requireClean(a, 'service');
    requireClean(b, 'raw pg');
    requireClean(c, 'service');
    requireClean(d, 'bare server');
    diagnostics.push(
      `create webhooks: service ${fmtMs(a.cpuMsPerOp)} CPU per request (${a.cores?.toFixed(2)} cores busy); ` +
        `the raw pg loop process ${fmtMs(b.cpuMsPerOp)} per transaction (${b.cores?.toFixed(2)} cores); ` +
        `the bare node:http + pg server ${fmtMs(d.cpuMsPerOp)} per request (${d.cores?.toFixed(2)} cores)`,
    );
    addFigure({
      id,
      figure: name,
      value: a.rps,
      unit: 'req/s',
      baseline: b.rps,
      baselineUnit: 'tx/s',
      ratio: a.rps / b.rps,
      ratioLabel: 'ratio',
      goal: '≥ 0.5',
      check: (r) => r >= 0.5,
      cpu: { value: a.cpuMsPerOp, baseline: b.cpuMsPerOp },
      detail: { service: a, rawPg: b, connections: CONNECTIONS },
    });
    addBareFigure('create_vs_bare', bareName, c, d, { connections: CONNECTIONS });
  } catch (error) {
    failedFigure(id, name, '≥ 0.5', error);
  } finally {
    await bare?.stop(5000);
  }
}

// 2 -------------------------------------------------------------------------------------

/** Checks an organization's list: all 50 endpoints, each with `recentEach` deliveries; returns the answer's size. */
async function checkListShape(ctx: Context, tenant: Tenant, recentEach: number): Promise<number> {
  const body = await expectOk(api(ctx.server.ready.url, 'GET', '/api/v1/webhooks', tenant.apiKey), 'list webhooks');
  const endpoints = body.endpoints as { recentDeliveries?: unknown[] }[];
  if (endpoints.length !== LIST_ENDPOINTS) throw new Error(`list answered ${endpoints.length} endpoints, expected ${LIST_ENDPOINTS}`);
  const wrong = endpoints.filter((e) => (e.recentDeliveries ?? []).length !== recentEach).length;
  if (wrong > 0) throw new Error(`${wrong} endpoints do not show ${recentEach} recent deliveries`);
  return JSON.stringify(body).length;
}

function listLoad(ctx: Context, tenant: Tenant, warmupSeconds: number): () => Promise<Load> {
  return httpLoad({ url: `${ctx.server.ready.url}/api/v1/webhooks`, connections: CONNECTIONS, warmupSeconds, headers: { authorization: `Bearer ${tenant.apiKey}` } });
}

/**
 * Latency is taken at an offered load of this fraction of the capacity measured just
 * before, in the same run: the time one request takes at a known utilisation, not the
 * queue in front of a server that a busier machine has saturated (that queue, 16 ÷
 * throughput, is reported apart as "saturated").
 */
const LOAD_FRACTION = 0.5;

interface ListMeasurement {
  /** 16 connections as fast as answered: the capacity, and a diagnostic in latency units. */
  saturated: Summary;
  /** At LOAD_FRACTION of that capacity, evenly paced: the figure. */
  paced: Summary;
  /** The paced rate, requests per second. */
  rate: number;
}

/** One latency measurement: SECONDS / 2 saturated, then SECONDS at LOAD_FRACTION of the throughput seen. */
async function listLatency(ctx: Context, load: Load, label: string): Promise<ListMeasurement> {
  const pid = ctx.server.proc.pid;
  const saturatedSegment = await loadSide(label, load, { seconds: SECONDS / 2, recordLatencies: true }, pid).segment();
  const saturated = summarize([saturatedSegment]);
  requireClean(saturated, `${label} (saturated)`);
  const rate = Math.max(1, Math.round(LOAD_FRACTION * saturated.rps));
  const paced = summarize([await loadSide(label, load, { seconds: SECONDS, rate, recordLatencies: true }, pid).segment()]);
  requireClean(paced, label);
  log(
    `  ${label}: saturated ${describe(saturatedSegment)}, p50 ${fmtMs(saturated.latency?.p50)}, p99 ${fmtMs(saturated.latency?.p99)}; ` +
      `at ${rate}/s p50 ${fmtMs(paced.latency?.p50)}, p99 ${fmtMs(paced.latency?.p99)}, ${fmtMs(paced.cpuMsPerOp)} CPU/req`,
  );
  return { saturated, paced, rate };
}

async function insertHistory(ctx: Context): Promise<{ seconds: number; analyzeSeconds: number; rows: number }> {
  const endpoints = [
    ...ctx.listEndpointIds.map((id) => ({ organizationId: ctx.tenants.list!.organizationId, id })),
    ...ctx.otherEndpoints,
  ];
  const t0 = performance.now();
  // One statement: terminal statuses only (the engine must not pick any up), spread
  // round-robin over the endpoints and back in time over ~3 months.
  await ctx.pool.query(
    `insert into webhook_deliveries
       (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at,
        last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at)
     select gen_random_uuid(), e.org, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
              || '","data":{"endpointId":"' || e.id || '","message":"This is a test delivery from the publishing platform."}}',
            e.status, e.attempts, null,
            case when e.status = 'delivered' then null else 'The endpoint answered HTTP 500.' end,
            case when e.status = 'delivered' then 200 else 500 end,
            'webhook-delivery/' || e.org || '/' || e.id || '/' || e.evt, null,
            case when e.status = 'delivered' then e.at + interval '200 milliseconds' else null end,
            e.at, e.at + interval '1 second'
       from (
         select ($1::uuid[])[1 + g % cardinality($1::uuid[])] as org,
                ($2::uuid[])[1 + g % cardinality($2::uuid[])] as id,
                'evt_hist' || lpad(g::text, 8, '0') as evt,
                case when g % 50 = 0 then 'dead_lettered' when g % 20 = 0 then 'failed' else 'delivered' end as status,
                case when g % 50 = 0 then 8 else 1 + (g % 3) end as attempts,
                now() - interval '1 hour' - g * interval '8 seconds' as at
           from generate_series(1, $3::int) g
       ) e`,
    [endpoints.map((e) => e.organizationId), endpoints.map((e) => e.id), HISTORY_ROWS],
  );
  const seconds = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  await ctx.pool.query('analyze webhook_deliveries');
  return { seconds, analyzeSeconds: (performance.now() - t1) / 1000, rows: HISTORY_ROWS };
}

/** Gives the twin organization's endpoints copies of the listed endpoints' five newest deliveries: the same answer, no history. */
async function copyNewestToTwin(ctx: Context): Promise<number> {
  const { rowCount } = await ctx.pool.query(
    `insert into webhook_deliveries
       (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at,
        last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at)
     select gen_random_uuid(), $1::uuid, m.twin, d.event_id, d.event_type, d.payload, d.status, d.attempt_count, d.next_attempt_at,
            d.last_error, d.last_response_status, d.workflow_id, null, d.delivered_at, d.created_at, d.updated_at
       from unnest($2::uuid[], $3::uuid[]) as m(listed, twin)
       cross join lateral (select * from webhook_deliveries w where w.endpoint_id = m.listed
                            order by w.created_at desc, w.id desc limit 5) d`,
    [ctx.tenants.twin!.organizationId, ctx.listEndpointIds, ctx.twinEndpointIds],
  );
  await ctx.pool.query('analyze webhook_deliveries');
  return rowCount ?? 0;
}

/** The five newest deliveries of every listed endpoint, newer than any history row. */
async function insertRecent(ctx: Context): Promise<number> {
  const organizationId = ctx.tenants.list!.organizationId;
  const { rowCount } = await ctx.pool.query(
    `insert into webhook_deliveries
       (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at,
        last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at)
     select gen_random_uuid(), $1::uuid, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
              || '","data":{"endpointId":"' || e.id || '","message":"This is a test delivery from the publishing platform."}}',
            'delivered', 1, null, null, 200, 'webhook-delivery/' || $1::text || '/' || e.id || '/' || e.evt, null,
            e.at + interval '200 milliseconds', e.at, e.at + interval '1 second'
       from (select ep.id, 'evt_recent' || n || '_' || replace(ep.id::text, '-', '') as evt, now() - interval '1 minute' - n * interval '1 second' as at
               from unnest($2::uuid[]) as ep(id) cross join generate_series(1, 5) n) e`,
    [organizationId, ctx.listEndpointIds],
  );
  await ctx.pool.query('analyze webhook_deliveries');
  return rowCount ?? 0;
}

/**
 * Figure 2, first thing after seeding, one load process for the listed organization
 * (50 endpoints), each measurement SECONDS long:
 *   1. no delivery in the table at all (the figure's baseline);
 *   2. diagnostic: 250 deliveries, the five newest of every endpoint: the answer the list
 *      will have at the end, so the cost of the bigger answer is known apart from the history;
 *   3. the history (one insert … select … generate_series over these endpoints and 50 of
 *      other organizations, older than step 2's rows), analyze, and the figure's measurement.
 * Then a diagnostic that alternates (A B B A A B B A) the listed organization with its
 * twin: 50 endpoints whose only deliveries are copies of the same five newest, i.e. the
 * same answer, for an organization with few rows in a big table. Afterwards a VACUUM, so
 * autovacuum of the new rows does not run during the figures that follow.
 */
async function benchListLatency(ctx: Context): Promise<void> {
  const history = HISTORY_ROWS.toLocaleString('en-US');
  const name = (p: string) => `GET /api/v1/webhooks ${p} at ${LOAD_FRACTION * 100}% of capacity, ${history} deliveries ÷ 0`;
  const listed = ctx.tenants.list!;
  try {
    log(`list_webhooks: ${CONNECTIONS} connections, ${SECONDS / 2} s saturated then ${SECONDS} s at ${LOAD_FRACTION * 100}% of that throughput per measurement`);
    const bytesBefore = await checkListShape(ctx, listed, 0);
    const measured = await withLoads([listLoad(ctx, listed, 2 * WARMUP_SECONDS)], async ([load]) => {
      const before = await listLatency(ctx, load!, '0 deliveries');
      const recentRows = await insertRecent(ctx);
      const bytesRecent = await checkListShape(ctx, listed, 5);
      const recent = await listLatency(ctx, load!, `${recentRows} deliveries, 5 per endpoint`);
      log(`list_webhooks: inserting ${history} older delivery rows (one insert … select … generate_series), analyze`);
      const inserted = await insertHistory(ctx);
      log(`  inserted in ${inserted.seconds.toFixed(1)} s, analyze ${inserted.analyzeSeconds.toFixed(1)} s`);
      const bytesAfter = await checkListShape(ctx, listed, 5);
      if (bytesAfter !== bytesRecent) throw new Error(`the answer changed with the history (${bytesRecent} → ${bytesAfter} bytes)`);
      const after = await listLatency(ctx, load!, `${history} + ${recentRows} deliveries`);
      return { before, recent, after, inserted, bytes: { before: bytesBefore, after: bytesAfter } };
    });
    const { before, recent, after } = measured;
    diagnostics.push(
      `list webhooks: server CPU per request ${fmtMs(before.paced.cpuMsPerOp)} with 0 deliveries (answer ${measured.bytes.before} bytes), ` +
        `${fmtMs(recent.paced.cpuMsPerOp)} with 250 (answer ${measured.bytes.after} bytes), ${fmtMs(after.paced.cpuMsPerOp)} with ${history} more (same answer); ` +
        `paced at ${before.rate}, ${recent.rate} and ${after.rate} req/s (${LOAD_FRACTION * 100}% of each one's saturated throughput)`,
    );
    const latencyFigure = (id: string, figure: string, p: 'p50' | 'p99', x: Summary, y: Summary, goal: boolean, detail: Record<string, unknown> = {}) =>
      addFigure({
        id,
        figure,
        value: x.latency![p],
        unit: 'ms',
        baseline: y.latency![p],
        baselineUnit: 'ms',
        ratio: x.latency![p] / y.latency![p],
        ratioLabel: 'ratio',
        goal: goal ? '≤ 1.5' : '—',
        ...(goal ? { check: (r: number) => r <= 1.5 } : {}),
        cpu: { value: x.cpuMsPerOp, baseline: y.cpuMsPerOp },
        detail,
      });
    latencyFigure('list_webhooks_p50', name('p50'), 'p50', after.paced, before.paced, true, { ...measured, loadFraction: LOAD_FRACTION, connections: CONNECTIONS });
    latencyFigure('list_webhooks_p99', name('p99'), 'p99', after.paced, before.paced, true);
    const same = (p: string) => `  diagnostic: same answer, ${history} + 250 ÷ 250 deliveries (${p})`;
    latencyFigure('list_webhooks_history_p50', same('p50'), 'p50', after.paced, recent.paced, false);
    latencyFigure('list_webhooks_history_p99', same('p99'), 'p99', after.paced, recent.paced, false);
    const saturated = (p: string) => `  diagnostic: saturated (${CONNECTIONS} connections, closed loop), ${history} ÷ 0 deliveries (${p})`;
    latencyFigure('list_webhooks_saturated_p50', saturated('p50'), 'p50', after.saturated, before.saturated, false);
    latencyFigure('list_webhooks_saturated_p99', saturated('p99'), 'p99', after.saturated, before.saturated, false);
  } catch (error) {
    failedFigure('list_webhooks_p50', name('p50'), '≤ 1.5', error);
    failedFigure('list_webhooks_p99', name('p99'), '≤ 1.5', error);
  }

  const listedRows = Math.round((HISTORY_ROWS * LIST_ENDPOINTS) / (LIST_ENDPOINTS + OTHER_ORGS * OTHER_ENDPOINTS_PER_ORG)) + 5 * LIST_ENDPOINTS;
  const twinName = (p: string) => `  diagnostic: same answer, org with ${listedRows.toLocaleString('en-US')} rows ÷ org with 250 (${p})`;
  if (figures.some((f) => f.id === 'list_webhooks_p50' && !f.error)) {
    try {
      const copied = await copyNewestToTwin(ctx);
      const bytesListed = await checkListShape(ctx, listed, 5);
      const bytesTwin = await checkListShape(ctx, ctx.tenants.twin!, 5);
      log(`list_webhooks diagnostic: listed organization vs its twin (${copied} copied rows, answers ${bytesListed} / ${bytesTwin} bytes), ${PATTERN} × ${SEGMENT_SECONDS} s`);
      const { a, b } = await withLoads([listLoad(ctx, listed, WARMUP_SECONDS), listLoad(ctx, ctx.tenants.twin!, WARMUP_SECONDS)], ([l, t]) =>
        interleave(
          loadSide('listed organization', l!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, ctx.server.proc.pid),
          loadSide('twin organization', t!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, ctx.server.proc.pid),
        ),
      );
      requireClean(a, 'list of the listed organization');
      requireClean(b, 'list of the twin');
      diagnostics.push(
        `list webhooks, same answer for an organization with many delivery rows and one with few: p50 ${fmtMs(a.latency?.p50)} vs ${fmtMs(b.latency?.p50)}, ` +
          `${a.rps.toFixed(1)} vs ${b.rps.toFixed(1)} req/s, server CPU per request ${fmtMs(a.cpuMsPerOp)} vs ${fmtMs(b.cpuMsPerOp)}`,
      );
      const detail = { listed: a, twin: b, responseBytes: { listed: bytesListed, twin: bytesTwin } };
      addFigure({ id: 'list_webhooks_twin_p50', figure: twinName('p50'), value: a.latency!.p50, unit: 'ms', baseline: b.latency!.p50, baselineUnit: 'ms', ratio: a.latency!.p50 / b.latency!.p50, ratioLabel: 'ratio', goal: '—', detail });
      addFigure({ id: 'list_webhooks_twin_p99', figure: twinName('p99'), value: a.latency!.p99, unit: 'ms', baseline: b.latency!.p99, baselineUnit: 'ms', ratio: a.latency!.p99 / b.latency!.p99, ratioLabel: 'ratio', goal: '—', detail: {} });
    } catch (error) {
      failedFigure('list_webhooks_twin_p50', twinName('p50'), '—', error);
    }
  }
  if (figures.some((f) => f.id === 'list_webhooks_p50' && !f.error)) await benchListVsBare(ctx);
  try {
    const t0 = performance.now();
    await ctx.pool.query('vacuum webhook_deliveries');
    log(`  vacuum ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } catch (error) {
    log(`  vacuum failed: ${String(error)}`);
  }
}

/**
 * The listed organization's answer (50 endpoints, 250 deliveries, after the history) from
 * the service and from the bare node:http + pg server running the same two queries,
 * closed loop, A B B A A B B A.
 */
async function benchListVsBare(ctx: Context): Promise<void> {
  const name = '  GET /api/v1/webhooks throughput ÷ bare node:http + pg server (250 deliveries)';
  const listed = ctx.tenants.list!;
  let bare: Child<{ url: string }> | null = null;
  try {
    bare = await startBareRest([listed]);
    const bareAnswer = await expectOk(api(bare.ready.url, 'GET', '/api/v1/webhooks', listed.apiKey), 'bare list');
    const serviceAnswer = await expectOk(api(ctx.server.ready.url, 'GET', '/api/v1/webhooks', listed.apiKey), 'service list');
    const ids = (answer: { endpoints: { id: string; recentDeliveries: { id: string }[] }[] }) =>
      answer.endpoints.flatMap((e) => [e.id, ...e.recentDeliveries.map((d) => d.id)]).join();
    if (ids(bareAnswer) !== ids(serviceAnswer)) throw new Error('the bare server lists other endpoints or deliveries than the service');
    const bytes = { service: JSON.stringify(serviceAnswer).length, bare: JSON.stringify(bareAnswer).length };
    log(`list_webhooks: service vs bare node:http + pg server (answers ${bytes.service} / ${bytes.bare} bytes), ${PATTERN} × ${SEGMENT_SECONDS} s`);
    const barePid = bare.proc.pid;
    const { a, b } = await withLoads(
      [
        listLoad(ctx, listed, WARMUP_SECONDS),
        httpLoad({ url: `${bare.ready.url}/api/v1/webhooks`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, headers: { authorization: `Bearer ${listed.apiKey}` } }),
      ],
      ([service, bareLoad]) =>
        interleave(
          loadSide('service list', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid),
          loadSide('bare list', bareLoad!, { seconds: SEGMENT_SECONDS }, barePid),
        ),
    );
    requireClean(a, 'service list');
    requireClean(b, 'bare list');
    diagnostics.push(
      `list webhooks vs the bare node:http + pg server: ${a.rps.toFixed(1)} vs ${b.rps.toFixed(1)} req/s, ` +
        `CPU per request ${fmtMs(a.cpuMsPerOp)} vs ${fmtMs(b.cpuMsPerOp)} (answers ${bytes.service} / ${bytes.bare} bytes)`,
    );
    addBareFigure('list_vs_bare', name, a, b, { responseBytes: bytes, connections: CONNECTIONS });
  } catch (error) {
    failedFigure('list_vs_bare', name, '≥ 0.5', error);
  } finally {
    await bare?.stop(5000);
  }
}

// 3 -------------------------------------------------------------------------------------

async function benchGateway(ctx: Context): Promise<unknown> {
  const name = 'GET /api/v1/connections ÷ Connect JSON ListConnections';
  const tenant = ctx.tenants.conn!;
  const base = ctx.server.ready.url;
  const connectPath = '/publishing.v1.ConnectionService/ListConnections';
  try {
    const rest = await expectOk(api(base, 'GET', '/api/v1/connections', tenant.apiKey), 'REST list connections');
    const connect = await expectOk(api(base, 'POST', connectPath, tenant.apiKey, '{}'), 'Connect list connections');
    if (JSON.stringify(rest) !== JSON.stringify(connect)) throw new Error('REST and Connect answers differ');
    if ((rest.connections as unknown[]).length !== LISTED_CONNECTIONS) throw new Error(`expected ${LISTED_CONNECTIONS} connections`);
    log(`rest_gateway: ${CONNECTIONS} connections each, ${PATTERN} × ${SEGMENT_SECONDS} s; answer ${JSON.stringify(rest).length} bytes`);
    const auth = { authorization: `Bearer ${tenant.apiKey}` };
    const { a, b } = await withLoads(
      [
        httpLoad({ url: `${base}/api/v1/connections`, connections: CONNECTIONS, warmupSeconds: WARMUP_SECONDS, headers: auth }),
        httpLoad({
          url: `${base}${connectPath}`,
          connections: CONNECTIONS,
          warmupSeconds: WARMUP_SECONDS,
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: '{}',
        }),
      ],
      ([r, c]) =>
        interleave(
          loadSide('REST gateway', r!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid),
          loadSide('Connect JSON', c!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid),
        ),
    );
    requireClean(a, 'REST gateway');
    requireClean(b, 'Connect JSON');
    diagnostics.push(
      `REST gateway: server ${fmtMs(a.cpuMsPerOp)} CPU per request via REST, ${fmtMs(b.cpuMsPerOp)} via Connect JSON ` +
        `(CPU overhead ${(((a.cpuMsPerOp ?? NaN) / (b.cpuMsPerOp ?? NaN) - 1) * 100).toFixed(1)}%)`,
    );
    const ratio = a.rps / b.rps;
    addFigure({ id: 'rest_gateway_ratio', figure: name, value: a.rps, unit: 'req/s', baseline: b.rps, baselineUnit: 'req/s', ratio, ratioLabel: 'ratio', goal: '—', detail: { rest: a, connect: b, connections: CONNECTIONS } });
    addFigure({ id: 'rest_gateway_overhead', figure: 'REST gateway overhead (1 − ratio)', value: null, unit: '', baseline: null, baselineUnit: '', ratio: 1 - ratio, ratioLabel: 'overhead', goal: '≤ 10%', check: (r) => r <= 0.1, detail: {} });
    return connect;
  } catch (error) {
    failedFigure('rest_gateway_overhead', 'REST gateway overhead (1 − ratio)', '≤ 10%', error);
    return null;
  }
}

// 4 -------------------------------------------------------------------------------------

async function benchGrpc(ctx: Context, responseJson: unknown): Promise<void> {
  const id = 'grpc_unary';
  const name = 'gRPC ListConnections ÷ bare connect-node server';
  let bare: Child<{ url: string }> | null = null;
  try {
    const tenant = ctx.tenants.conn!;
    responseJson ??= await expectOk(
      api(ctx.server.ready.url, 'POST', '/publishing.v1.ConnectionService/ListConnections', tenant.apiKey, '{}'),
      'Connect list connections',
    );
    bare = await startChild<{ url: string }>('bare-grpc.ts', { responseJson });
    log(`${id}: ${CONNECTIONS} concurrent calls on one HTTP/2 session each, ${PATTERN} × ${SEGMENT_SECONDS} s`);
    const grpcLoad = (baseUrl: string) => () => startLoad('load-grpc.ts', { baseUrl, apiKey: tenant.apiKey, loops: CONNECTIONS, warmupSeconds: WARMUP_SECONDS });
    const barePid = bare.proc.pid;
    const { a, b } = await withLoads([grpcLoad(ctx.server.ready.url), grpcLoad(bare.ready.url)], ([s, r]) =>
      interleave(
        loadSide('service (calls)', s!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, ctx.server.proc.pid),
        loadSide('bare connect-node (calls)', r!, { seconds: SEGMENT_SECONDS, recordLatencies: true }, barePid),
      ),
    );
    requireClean(a, 'gRPC service');
    requireClean(b, 'bare gRPC');
    diagnostics.push(
      `gRPC: service ${fmtMs(a.cpuMsPerOp)} CPU per call, ${a.cores?.toFixed(2)} cores busy, p50 ${fmtMs(a.latency?.p50)} per call with ${CONNECTIONS} in flight; ` +
        `bare server ${fmtMs(b.cpuMsPerOp)} per call, ${b.cores?.toFixed(2)} cores, p50 ${fmtMs(b.latency?.p50)}`,
    );
    addFigure({ id, figure: name, value: a.rps, unit: 'calls/s', baseline: b.rps, baselineUnit: 'calls/s', ratio: a.rps / b.rps, ratioLabel: 'ratio', goal: '—', detail: { service: a, bare: b, loops: CONNECTIONS } });
  } catch (error) {
    failedFigure(id, name, '—', error);
  } finally {
    await bare?.stop(5000);
  }
}

// 5 -------------------------------------------------------------------------------------

/** A webhook.test body as the service writes it, for the raw loop's request size. */
function samplePayload(endpointId: string): string {
  return JSON.stringify({
    id: `evt_${randomUUID().replaceAll('-', '')}`,
    type: 'webhook.test',
    createdAt: new Date().toISOString(),
    data: { endpointId, message: 'This is a test delivery from the publishing platform.' },
  });
}

let engineRunNumber = 0;

/** Inserts n pending deliveries, round-robin over `endpointIds`, and waits until the engine has delivered all of them. */
async function engineRun(ctx: Context, n: number, tenant: Tenant, endpointIds: string[]): Promise<Segment> {
  const tag = `evt_bench${++engineRunNumber}_`;
  const { organizationId } = tenant;
  const insertedAt = new Date();
  await ctx.pool.query(
    `insert into webhook_deliveries
       (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at,
        last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at)
     select gen_random_uuid(), $1::uuid, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || $4::text || '","data":{"endpointId":"' || e.id
              || '","message":"This is a test delivery from the publishing platform."}}',
            'pending', 0, $5, null, null, 'webhook-delivery/' || $1::text || '/' || e.id || '/' || e.evt, null, null, $5, $5
       from (select ($2::uuid[])[1 + g % cardinality($2::uuid[])] as id, $3::text || lpad(g::text, 6, '0') as evt
               from generate_series(1, $6::int) g) e`,
    [organizationId, endpointIds, tag, insertedAt.toISOString(), insertedAt, n],
  );
  const t0 = Date.now();
  const deadline = t0 + Math.max(60_000, n * 50);
  // This run's rows by (endpoint_id, created_at): the recent-deliveries index, never a scan of the history.
  const mine = `from webhook_deliveries where endpoint_id = any($1::uuid[]) and created_at = $2`;
  for (;;) {
    const { rows } = await ctx.pool.query<{ delivered: number; other: number; last: Date | null }>(
      `select count(*) filter (where status = 'delivered')::int as delivered,
              count(*) filter (where status not in ('delivered', 'pending'))::int as other,
              max(delivered_at) as last ${mine}`,
      [endpointIds, insertedAt],
    );
    const row = rows[0]!;
    if (row.other > 0) {
      const { rows: bad } = await ctx.pool.query(`select status, last_error ${mine} and status not in ('delivered', 'pending') limit 1`, [endpointIds, insertedAt]);
      throw new Error(`${row.other} deliveries did not succeed: ${JSON.stringify(bad[0])}`);
    }
    if (row.delivered === n && row.last) {
      // The service's own clock stamps delivered_at; from the commit of the insert to the last one.
      const seconds = Math.max(0.001, (new Date(row.last).getTime() - t0) / 1000);
      return { ok: n, errors: 0, non2xx: 0, seconds, cpuSeconds: 0, firstError: null };
    }
    if (Date.now() > deadline) throw new Error(`engine delivered ${row.delivered} of ${n} within ${Math.round((deadline - t0) / 1000)} s`);
    await sleep(50);
  }
}

/** The engine's second figure: as many endpoints as a large customer has, all at the receiver. */
const MANY_DELIVERY_ENDPOINTS = 1000;

/**
 * Embedded engine vs the raw keep-alive loop, both spreading their POSTs over the same
 * endpoints' paths at the receiver (one host and port: one connection pool on each side).
 */
async function benchEngine(ctx: Context, tenant: Tenant, endpointIds: string[]): Promise<void> {
  const count = endpointIds.length.toLocaleString('en-US');
  const id = endpointIds.length === DELIVERY_ENDPOINTS ? 'delivery_engine' : `delivery_engine_${endpointIds.length}`;
  const name = `Embedded engine deliveries/s ÷ raw HTTPS keep-alive loop, ${count} endpoints`;
  try {
    const body = samplePayload(endpointIds[0]!);
    const perSegment = Math.floor(DELIVERIES / 4);
    const warmup = Math.min(200, perSegment);
    log(`${id}: warm-up of ${warmup} deliveries`);
    const warm = await engineRun(ctx, warmup, tenant, endpointIds);
    log(`  warm-up: ${(warm.ok / warm.seconds).toFixed(1)} deliveries/s`);
    log(`${id}: engine ${perSegment} deliveries per segment over ${count} endpoints (its concurrency: DELIVERY_CONCURRENCY, default 64) vs raw loop ${CONNECTIONS} concurrent × ${SEGMENT_SECONDS} s, ${PATTERN}`);
    const engine: Side = {
      label: 'engine (deliveries)',
      async segment() {
        const { result, cpuSeconds } = await withCpu(ctx.server.proc.pid, () => engineRun(ctx, perSegment, tenant, endpointIds));
        return { ...result, cpuSeconds };
      },
    };
    const { a, b } = await withLoads(
      [
        () =>
          startLoad('load-https.ts', {
            url: ctx.receiver.ready.url,
            paths: endpointIds.map((_, i) => `/hook/${i}`),
            caPem: ctx.tls.caPem,
            concurrency: CONNECTIONS,
            warmupSeconds: WARMUP_SECONDS,
            body,
          }),
      ],
      ([raw]) => interleave(engine, loadSide('raw https keep-alive (requests)', raw!, { seconds: SEGMENT_SECONDS })),
    );
    requireClean(b, 'raw https');
    const phases = await attemptPhases(ctx, endpointIds);
    diagnostics.push(
      `delivery engine, ${count} endpoints: server ${fmtMs(a.cpuMsPerOp)} CPU per delivery (${a.cores?.toFixed(2)} cores busy), ` +
        `${fmtMs((CONNECTIONS / a.rps) * 1000)} per delivery and receiver connection (${CONNECTIONS} ÷ throughput: both sides keep ${CONNECTIONS} connections; the engine works on DELIVERY_CONCURRENCY deliveries at once), and per attempt row (mean): ` +
        `${fmtMs(phases.startToDispatchMs)} from the attempt row to dispatch (connection, pooled or new), ${fmtMs(phases.dispatchToFinishMs)} from dispatch to the outcome recorded; ` +
        `raw keep-alive loop ${fmtMs(b.cpuMsPerOp)} per request (${b.cores?.toFixed(2)} cores)`,
    );
    addFigure({
      id,
      figure: name,
      value: a.rps,
      unit: 'deliveries/s',
      baseline: b.rps,
      baselineUnit: 'req/s',
      ratio: a.rps / b.rps,
      ratioLabel: 'ratio',
      goal: '≥ 0.8',
      check: (r) => r >= 0.8,
      cpu: { value: a.cpuMsPerOp, baseline: b.cpuMsPerOp },
      detail: { engine: a, rawHttps: b, endpoints: endpointIds.length, concurrency: CONNECTIONS, deliveriesMeasured: perSegment * 4 },
    });
  } catch (error) {
    failedFigure(id, name, '≥ 0.8', error);
  }
}

/** Where an attempt's time goes, from its row's timestamps (the service's clock), over every attempt to these endpoints. */
async function attemptPhases(ctx: Context, endpointIds: string[]): Promise<{ startToDispatchMs: number; dispatchToFinishMs: number }> {
  const { rows } = await ctx.pool.query<{ startToDispatchMs: number; dispatchToFinishMs: number }>(
    `select avg(extract(epoch from a.dispatched_at - a.started_at) * 1000)::float8 as "startToDispatchMs",
            avg(extract(epoch from a.finished_at - a.dispatched_at) * 1000)::float8 as "dispatchToFinishMs"
       from delivery_attempts a join webhook_deliveries d on d.id = a.delivery_id
      where d.endpoint_id = any($1::uuid[])`,
    [endpointIds],
  );
  return rows[0]!;
}

/** Arrival time at the receiver (epoch ms, the receiver's clock) of the next request under /hook/latency. */
async function arrival(ctx: Context): Promise<number> {
  return (await ctx.receiver.next<{ at: number }>('received', 30_000)).at;
}

const epochNow = () => performance.timeOrigin + performance.now();

/**
 * Publish-to-receiver latency: POST /api/v1/webhooks/{id}/test on the service (embedded
 * engine) until the receiver has the whole request, against a raw HTTPS POST (keep-alive)
 * from this process to the same receiver until it has it: one request in flight at a time,
 * A B B A blocks, the service's CPU per publish read over its blocks. 120 publishes stay
 * under the organization's 300 test calls a minute.
 */
async function benchPublishLatency(ctx: Context): Promise<void> {
  const samples = 120;
  const block = samples / 4;
  const name = (p: string) => `Publish-to-receiver latency ${p}, embedded engine ÷ raw HTTPS POST`;
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: [ctx.tls.caPem] });
  try {
    const tenant = ctx.tenants.publish!;
    const [endpointId] = await createEndpoints(ctx.server.ready.url, tenant, [`${ctx.receiver.ready.url}/hook/latency`]);
    const body = samplePayload(endpointId!);
    const answered: number[] = [];
    const publish = async () => {
      const t0 = epochNow();
      const answer = await api(ctx.server.ready.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, tenant.apiKey, '{}');
      answered.push(epochNow() - t0);
      if (answer.status !== 200) throw new Error(`test publish: HTTP ${answer.status} ${answer.text.slice(0, 200)}`);
      return (await arrival(ctx)) - t0;
    };
    const target = new URL(ctx.receiver.ready.url);
    const rawPost = async () => {
      const t0 = epochNow();
      await new Promise<void>((resolve, reject) => {
        const req = https.request(
          { method: 'POST', host: target.hostname, port: Number(target.port), path: '/hook/latency-raw', agent, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } },
          (res) => {
            res.resume();
            res.on('end', resolve);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
      return (await arrival(ctx)) - t0;
    };
    log(`publish_latency: ${samples} test publishes vs ${samples} raw POSTs, one at a time, ${PATTERN.slice(0, 4)} blocks of ${block}`);
    for (let i = 0; i < 5; i++) {
      await publish();
      await rawPost();
    }
    const service: number[] = [];
    const raw: number[] = [];
    let serviceCpu: number | null = 0;
    for (const which of PATTERN.slice(0, 4)) {
      if (which === 'A') {
        const { cpuSeconds } = await withCpu(ctx.server.proc.pid, async () => {
          for (let i = 0; i < block; i++) service.push(await publish());
        });
        serviceCpu = serviceCpu === null || cpuSeconds === null ? null : serviceCpu + cpuSeconds;
      } else {
        for (let i = 0; i < block; i++) raw.push(await rawPost());
      }
    }
    service.sort((x, y) => x - y);
    raw.sort((x, y) => x - y);
    answered.sort((x, y) => x - y);
    const cpuPerPublish = serviceCpu === null ? null : (serviceCpu * 1000) / samples;
    diagnostics.push(
      `publish-to-receiver: service p50 ${fmtMs(percentile(service, 50))}, p99 ${fmtMs(percentile(service, 99))}, ${fmtMs(cpuPerPublish)} service CPU per publish ` +
        `(the API call, the delivery and the engine's polling meanwhile); the API call alone answered in p50 ${fmtMs(percentile(answered, 50))}; ` +
        `raw POST p50 ${fmtMs(percentile(raw, 50))}, p99 ${fmtMs(percentile(raw, 99))}`,
    );
    for (const p of [50, 99] as const) {
      addFigure({
        id: `publish_latency_p${p}`,
        figure: name(`p${p}`),
        value: percentile(service, p),
        unit: 'ms',
        baseline: percentile(raw, p),
        baselineUnit: 'ms',
        ratio: percentile(service, p) / percentile(raw, p),
        ratioLabel: 'ratio',
        goal: p === 50 ? '≤ 3' : '—',
        ...(p === 50 ? { check: (r: number) => r <= 3 } : {}),
        cpu: { value: cpuPerPublish, baseline: null },
        detail: p === 50 ? { samples, serviceMs: service, rawMs: raw } : {},
      });
    }
  } catch (error) {
    failedFigure('publish_latency_p50', name('p50'), '≤ 3', error);
  } finally {
    agent.destroy();
  }
}

// 5b ------------------------------------------------------------------------------------

/**
 * Deliveries recorded per second by PublishEvent to an organization with 100 subscribed
 * endpoints, against a raw pg loop inserting the same rows with one insert ... select per
 * transaction. The organization's monthly quota is used up, so each publish runs its whole
 * path (one statement reading the organization and recording the event and its 100
 * deliveries, then the answer) but records the deliveries failed: no delivery work competes with the
 * measurement, and the raw side writes the same failed rows (checked after the run). A
 * publish with nothing left to send takes no lock on the quota's row, so this figure does
 * not measure that lock; test/events/publish.test.ts covers concurrent publishes near the quota.
 */
async function benchPublishFanOut(ctx: Context): Promise<void> {
  const id = 'publish_fan_out';
  const name = `PublishEvent deliveries recorded/s, ${FAN_OUT_ENDPOINTS} subscribed endpoints ÷ raw pg insert of the same rows`;
  try {
    const organizationId = ctx.tenants.fanout!.organizationId;
    const eventType = 'post.held';
    await ctx.pool.query(`update organizations set plan = 'enterprise', monthly_delivery_quota = 1 where id = $1`, [organizationId]);
    await ctx.pool.query(`insert into delivery_usage (organization_id, month, deliveries) values ($1, date_trunc('month', now() at time zone 'utc')::date, 1)`, [organizationId]);
    await ctx.pool.query(
      `insert into webhook_endpoints (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
       select gen_random_uuid(), $1, 'https://fanout-' || g || '.example.com/in', '', array[$2::text], 'dev', sha256(g::text::bytea), now(), now()
         from generate_series(1, $3::int) g`,
      [organizationId, eventType, FAN_OUT_ENDPOINTS],
    );
    const spec = (mode: 'service' | 'raw') => ({
      mode,
      baseUrl: ctx.server.ready.url,
      token: INTERNAL_TOKEN,
      databaseUrl: DATABASE_URL,
      organizationId,
      eventType,
      // The raw side writes the reason the service records, so both write the same rows.
      refusal: quotaRefusalOf({ plan: 'enterprise', monthlyDeliveryQuota: 1 }),
      loops: CONNECTIONS,
      warmupSeconds: WARMUP_SECONDS,
    });
    log(`${id}: ${CONNECTIONS} gRPC loops vs ${CONNECTIONS} pg clients, ${FAN_OUT_ENDPOINTS} rows per operation, ${PATTERN} × ${SEGMENT_SECONDS} s`);
    const { a, b } = await withLoads(
      [() => startLoad('load-publish.ts', spec('service')), () => startLoad('load-publish.ts', spec('raw'))],
      ([service, raw]) =>
        interleave(
          loadSide('service (publishes)', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid),
          loadSide('raw pg (tx)', raw!, { seconds: SEGMENT_SECONDS }),
        ),
    );
    requireClean(a, 'service');
    requireClean(b, 'raw pg');
    // What the figure claims: every row of both sides failed over the quota, with one reason, so no delivery work competed.
    const { rows: written } = await ctx.pool.query<{ rows: string; sendable: string; reasons: string }>(
      `select count(*) as rows, count(*) filter (where status <> 'failed') as sendable, count(distinct last_error) as reasons
         from webhook_deliveries where organization_id = $1`,
      [organizationId],
    );
    if (Number(written[0]!.sendable) > 0 || Number(written[0]!.reasons) !== 1) {
      throw new Error(`the two sides did not write the same failed rows: ${JSON.stringify(written[0])}`);
    }
    diagnostics.push(`publish fan-out: service ${fmtMs(a.cpuMsPerOp)} CPU per publish of ${FAN_OUT_ENDPOINTS} deliveries (${a.cores?.toFixed(2)} cores busy); ${written[0]!.rows} rows written by both sides, all failed with one reason`);
    addFigure({
      id,
      figure: name,
      value: a.rps * FAN_OUT_ENDPOINTS,
      unit: 'deliveries/s',
      baseline: b.rps * FAN_OUT_ENDPOINTS,
      baselineUnit: 'rows/s',
      ratio: a.rps / b.rps,
      ratioLabel: 'ratio',
      goal: '≥ 0.5',
      check: (r) => r >= 0.5,
      cpu: { value: a.cpuMsPerOp, baseline: b.cpuMsPerOp },
      detail: { service: a, rawPg: b, endpoints: FAN_OUT_ENDPOINTS, connections: CONNECTIONS },
    });
  } catch (error) {
    failedFigure(id, name, '≥ 0.5', error);
  }
}

// 6 -------------------------------------------------------------------------------------

/**
 * The memory mix, cycled by every connection: reads and writes of webhooks, connection
 * lists over REST and Connect, and errors (validation, not found, bad key, no key, no
 * route, malformed JSON). The webhook list asks for 10 per page so that the endpoints
 * this mix keeps creating do not make it the whole cost.
 */
function mixedRequests(tenant: Tenant, receiverUrl: string): NonNullable<HttpLoadInput['requests']> {
  const auth = { authorization: `Bearer ${tenant.apiKey}` };
  const json = { ...auth, 'content-type': 'application/json' };
  return [
    { method: 'GET', path: '/api/v1/webhooks?pageSize=10', headers: auth },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: JSON.stringify({ url: `${receiverUrl}/hook/mem`, eventNames: ['webhook.test'] }) },
    { method: 'GET', path: '/api/v1/connections', headers: auth },
    { method: 'POST', path: '/publishing.v1.ConnectionService/ListConnections', headers: json, body: '{}' },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: JSON.stringify({ url: 'http://example.com/not-https' }) },
    { method: 'DELETE', path: `/api/v1/webhooks/${randomUUID()}`, headers: auth },
    { method: 'GET', path: '/api/v1/connections', headers: { authorization: 'Bearer pk_live_not-a-real-key' } },
    { method: 'GET', path: '/api/v1/no-such-route', headers: auth },
    { method: 'POST', path: '/api/v1/webhooks', headers: json, body: '{"url": ' },
    { method: 'GET', path: '/api/v1/webhooks', headers: {} },
  ];
}

async function benchMemory(ctx: Context): Promise<void> {
  const id = 'memory_growth';
  const name = `Server RSS after ${MEMORY_LARGE.toLocaleString('en-US')} ÷ after ${MEMORY_SMALL.toLocaleString('en-US')} mixed requests`;
  let server: Child<{ url: string }> | null = null;
  try {
    // A fresh server process, so "after 10,000" is not after the other benchmarks' traffic.
    server = await startChild<{ url: string }>('server.ts', {}, { env: ctx.serverEnv, nodeArgs: SERVER_NODE_ARGS });
    const url = server.ready.url;
    const pid = server.proc.pid;
    const requests = mixedRequests(ctx.tenants.mem!, ctx.receiver.ready.url);
    const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
    const sample = async (done: number) => {
      await sleep(500);
      const [rss, heapUsed, heapTotal, external] = await scrapeMetrics(url, [
        'process_resident_memory_bytes',
        'nodejs_heap_size_used_bytes',
        'nodejs_heap_size_total_bytes',
        'nodejs_external_memory_bytes',
      ]);
      const point = { requests: done, rssMiB: mib(rss!), heapUsedMiB: mib(heapUsed!), heapTotalMiB: mib(heapTotal!), externalMiB: mib(external!) };
      log(`  after ${done.toLocaleString('en-US')}: RSS ${point.rssMiB} MiB, heap ${point.heapUsedMiB}/${point.heapTotalMiB} MiB, external ${point.externalMiB} MiB`);
      return point;
    };
    log(`${id}: fresh server, ${requests.length}-request mix, ${CONNECTIONS} connections`);
    const trajectory = [await sample(0)];
    const parts: Measured[] = [];
    let afterSustained: Awaited<ReturnType<typeof sample>> | null = null;
    await withLoads([httpLoad({ url, connections: CONNECTIONS, warmupSeconds: 0, requests })], async ([load]) => {
      const rest = MEMORY_LARGE - MEMORY_SMALL;
      // The first part is the baseline; the rest in three parts, for the trajectory.
      for (const amount of [MEMORY_SMALL, Math.floor(rest / 3), Math.floor(rest / 3), rest - 2 * Math.floor(rest / 3)]) {
        if (amount <= 0) continue;
        const { result, cpuSeconds } = await withCpu(pid, () => load!.run({ amount }));
        const answered = result.ok + result.non2xx;
        log(`  mixed ×${amount.toLocaleString('en-US')}: ${answered} answered (${result.non2xx} of them errors by design) in ${result.seconds.toFixed(1)} s`);
        if (result.errors > 0 || answered !== amount) throw new Error(`${answered} of ${amount} answered, ${result.errors} errors`);
        parts.push({ ...result, cpuSeconds });
        trajectory.push(await sample(trajectory.at(-1)!.requests + amount));
      }
      const sustained = await load!.run({ seconds: MEMORY_SECONDS });
      log(`  mixed for ${MEMORY_SECONDS} s: ${sustained.ok + sustained.non2xx} answered, ${sustained.errors} errors`);
      if (sustained.errors > 0) throw new Error(`${sustained.errors} errors in the ${MEMORY_SECONDS} s mixed load`);
      afterSustained = await sample(trajectory.at(-1)!.requests + sustained.ok + sustained.non2xx);
    });
    const small = trajectory[1]!;
    const large = trajectory.at(-1)!;
    const ratio = large.rssMiB / small.rssMiB;
    const summary = summarize(parts);
    diagnostics.push(
      `memory: ${trajectory.map((t) => `${t.requests / 1000}k → RSS ${t.rssMiB} MiB (heap ${t.heapUsedMiB}/${t.heapTotalMiB})`).join(', ')}; ` +
        `then ${MEMORY_SECONDS} s more of the mix (${afterSustained!.requests.toLocaleString('en-US')} requests in all) → RSS ${afterSustained!.rssMiB} MiB (heap ${afterSustained!.heapUsedMiB}/${afterSustained!.heapTotalMiB})`,
    );
    addFigure({
      id,
      figure: name,
      value: large.rssMiB,
      unit: 'MiB',
      baseline: small.rssMiB,
      baselineUnit: 'MiB',
      ratio: ratio - 1,
      ratioLabel: 'growth',
      goal: '≤ 10%',
      check: (g) => g <= 0.1,
      detail: { ratio, trajectory, afterSustained, sustainedSeconds: MEMORY_SECONDS, statusCodes: summary.statusCodes, serverCpuMsPerRequest: summary.cpuMsPerOp, mix: requests.map((r) => `${r.method} ${r.path}`) },
    });
  } catch (error) {
    failedFigure(id, name, '≤ 10%', error);
  } finally {
    await server?.stop();
  }
}

// ---------------------------------------------------------------------------------------
// Report

function fmt(value: number | null, unit = ''): string {
  if (value === null || !Number.isFinite(value)) return '—';
  const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)}${unit ? ` ${unit}` : ''}`;
}

function ratioText(f: Figure): string {
  if (f.ratio === null) return '—';
  if (f.ratioLabel === 'overhead' || f.ratioLabel === 'growth') return `${(f.ratio * 100).toFixed(1)}% ${f.ratioLabel}`;
  return f.ratio.toFixed(3);
}

function resultText(f: Figure): string {
  if (f.error) return `ERROR: ${f.error}`;
  if (f.pass === null) return f.goal === '—' ? 'info' : '—';
  return f.pass ? 'pass' : 'FAIL';
}

function rows(): string[][] {
  return figures.map((f) => [f.figure, fmt(f.value, f.unit), fmt(f.baseline, f.baselineUnit), ratioText(f), cpuText(f), f.goal, resultText(f)]);
}

function cpuText(f: Figure): string {
  if (!f.cpu) return '';
  return `${fmt(f.cpu.value)} / ${fmt(f.cpu.baseline)}`;
}

const HEADER = ['Figure', 'Value', 'Baseline', 'Ratio', 'CPU ms/op (value / baseline)', 'Goal', 'Result'];

function textTable(): string {
  const all = [HEADER, ...rows()];
  const widths = HEADER.map((_, i) => Math.max(...all.map((r) => [...r[i]!].length)));
  const line = (r: string[]) => r.map((c, i) => c + ' '.repeat(widths[i]! - [...c].length)).join('  ');
  return [line(HEADER), widths.map((w) => '-'.repeat(w)).join('  '), ...rows().map(line)].join('\n');
}

function markdownTable(): string {
  const escape = (c: string) => c.replaceAll('|', '\\|');
  return [`| ${HEADER.join(' | ')} |`, `|${HEADER.map(() => '---').join('|')}|`, ...rows().map((r) => `| ${r.map(escape).join(' | ')} |`)].join('\n');
}

interface Machine {
  os: string;
  cpuModel: string;
  cpuCount: number;
  totalMemoryGiB: number;
  node: string;
  postgres: string;
  loadAverageAtStart: number[];
  loadAverageAtEnd?: number[];
}

async function describeMachine(): Promise<Machine> {
  const cpus = os.cpus();
  const postgres = await admin(async (c) => (await c.query<{ v: string }>('select version() as v')).rows[0]!.v);
  return {
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    cpuModel: cpus[0]?.model ?? 'unknown',
    cpuCount: cpus.length,
    totalMemoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    postgres,
    loadAverageAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

function writeResults(machine: Machine): void {
  machine.loadAverageAtEnd = os.loadavg().map((l) => Math.round(l * 100) / 100);
  const parameters = {
    seconds: SECONDS,
    warmupSeconds: WARMUP_SECONDS,
    connections: CONNECTIONS,
    deliveries: DELIVERIES,
    historyRows: HISTORY_ROWS,
    memoryRequests: [MEMORY_SMALL, MEMORY_LARGE],
    loadFraction: LOAD_FRACTION,
    serverNodeArgs: SERVER_NODE_ARGS,
    database: DB_NAME,
  };
  const json = { generatedAt: new Date().toISOString(), wallSeconds: Math.round(elapsed()), machine, parameters, figures, diagnostics, errors };
  fs.writeFileSync(path.join(__dirname, 'results.json'), `${JSON.stringify(json, null, 2)}\n`);
  const md = [
    '# Benchmark results',
    '',
    `Generated by \`npm run bench\` on ${json.generatedAt} in ${json.wallSeconds} s. Every figure is a ratio to a baseline measured in the same run (see bench/README.md).`,
    '',
    markdownTable(),
    '',
    '## Machine',
    '',
    `- CPU: ${machine.cpuModel} × ${machine.cpuCount}`,
    `- Memory: ${machine.totalMemoryGiB} GiB`,
    `- OS: ${machine.os}`,
    `- Node: ${machine.node}`,
    `- PostgreSQL: ${machine.postgres}`,
    `- Service Node arguments: ${SERVER_NODE_ARGS.join(' ') || 'none'}`,
    `- Load average (1/5/15 min) at start ${machine.loadAverageAtStart.join(' / ')}, at end ${machine.loadAverageAtEnd.join(' / ')}`,
    '',
    '## Parameters',
    '',
    `- Duration per figure and per baseline: ${SECONDS} s (throughput pairs: ${PATTERN.split('').join(' ')} segments of ${SEGMENT_SECONDS} s), warm-up ${WARMUP_SECONDS} s per load process (${2 * WARMUP_SECONDS} s for the first)`,
    `- Concurrency: ${CONNECTIONS} connections / clients / loops on both sides of every figure`,
    `- Deliveries measured: ${2 * Math.floor(DELIVERIES / 2)}; history rows: ${HISTORY_ROWS.toLocaleString('en-US')}; memory: ${MEMORY_SMALL.toLocaleString('en-US')} then ${MEMORY_LARGE.toLocaleString('en-US')} requests`,
    ...(diagnostics.length > 0 ? ['', '## Diagnostics', '', ...diagnostics.map((d) => `- ${d}`)] : []),
    ...(errors.length > 0 ? ['', '## Errors', '', ...errors.map((e) => `- ${e.split('\n')[0]}`)] : []),
    '',
  ].join('\n');
  fs.writeFileSync(path.join(__dirname, 'results.md'), md);
}

// ---------------------------------------------------------------------------------------

async function main(): Promise<number> {
  log(`parameters: ${SECONDS} s per figure, ${CONNECTIONS} connections, ${DELIVERIES} deliveries, ${HISTORY_ROWS} history rows, memory ${MEMORY_SMALL}/${MEMORY_LARGE}, service Node arguments: ${SERVER_NODE_ARGS.join(' ') || 'none'}`);
  const machine = await describeMachine();
  const tls = await makeTestTls();

  await admin(async (c) => {
    await c.query(`drop database if exists ${DB_NAME} with (force)`);
    await c.query(`create database ${DB_NAME}`);
    // The migrations grant to the service role by name; on a fresh cluster nothing has made it yet.
    await ensureServiceRoles(c, { login: true });
  });
  const pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
  // An idle client dropped by the server must not crash the run; the next query reports it.
  pool.on('error', (error) => log(`database pool: ${error.message}`));
  let server: Child<{ url: string }> | null = null;
  let receiver: Child<{ url: string }> | null = null;
  try {
    const orm = await openDatabase(DATABASE_URL, { pool: { min: 0, max: 1 } });
    try {
      await migrate(orm);
    } finally {
      await orm.close();
    }
    const serverEnv = serverEnvOf(tls);
    [receiver, server] = await Promise.all([
      startChild<{ url: string }>('receiver.ts', { keyPem: tls.keyPem, certPem: tls.certPem }),
      startChild<{ url: string }>('server.ts', {}, { env: serverEnv, nodeArgs: SERVER_NODE_ARGS }),
    ]);
    log(`service ${server.ready.url}, receiver ${receiver.ready.url}`);

    const others = Array.from({ length: OTHER_ORGS }, (_, i) => `other${i + 1}`);
    const tenants = await seedTenants(['write', 'list', 'twin', 'conn', 'deliver', 'deliverMany', 'publish', 'mem', 'fanout', ...others]);
    const listUrls = Array.from({ length: LIST_ENDPOINTS }, (_, i) => `https://hooks${i}.example.com/in`);
    const listEndpointIds = await createEndpoints(server.ready.url, tenants.list!, listUrls);
    const twinEndpointIds = await createEndpoints(server.ready.url, tenants.twin!, listUrls);
    const otherEndpoints: Context['otherEndpoints'] = [];
    for (const name of others) {
      const ids = await createEndpoints(server.ready.url, tenants[name]!, Array.from({ length: OTHER_ENDPOINTS_PER_ORG }, (_, i) => `https://${name}-${i}.example.com/in`));
      otherEndpoints.push(...ids.map((id) => ({ organizationId: tenants[name]!.organizationId, id })));
    }
    const deliveryEndpointIds = await createEndpoints(server.ready.url, tenants.deliver!, Array.from({ length: DELIVERY_ENDPOINTS }, (_, i) => `${receiver!.ready.url}/hook/${i}`));
    await insertConnections(pool, tenants.conn!.organizationId, LISTED_CONNECTIONS);
    await insertConnections(pool, tenants.mem!.organizationId, LISTED_CONNECTIONS);
    log(`seeded ${Object.keys(tenants).length} organizations, ${2 * LIST_ENDPOINTS + otherEndpoints.length + deliveryEndpointIds.length} endpoints`);

    const ctx: Context = { tls, pool, server, receiver, tenants, listEndpointIds, twinEndpointIds, otherEndpoints, deliveryEndpointIds, serverEnv };

    let connectAnswer: unknown = null;
    const benches: [string, () => Promise<void>][] = [
      ['list_webhooks', () => benchListLatency(ctx)],
      ['create_webhooks', () => benchCreateWebhooks(ctx)],
      ['rest_gateway', async () => void (connectAnswer = await benchGateway(ctx))],
      ['grpc_unary', () => benchGrpc(ctx, connectAnswer)],
      ['delivery_engine', () => benchEngine(ctx, tenants.deliver!, deliveryEndpointIds)],
      [
        'delivery_engine_1000',
        async () => {
          const urls = Array.from({ length: MANY_DELIVERY_ENDPOINTS }, (_, i) => `${receiver!.ready.url}/hook/${i}`);
          await benchEngine(ctx, tenants.deliverMany!, await createEndpoints(server!.ready.url, tenants.deliverMany!, urls));
        },
      ],
      ['publish_latency', () => benchPublishLatency(ctx)],
      ['publish_fan_out', () => benchPublishFanOut(ctx)],
      ['memory_growth', () => benchMemory(ctx)],
    ];
    for (const [id, run] of benches) {
      if (ONLY && !ONLY.includes(id)) continue;
      await run();
    }
    const order = ['create_webhooks', 'create_vs_bare', 'list_webhooks_p50', 'list_webhooks_p99', 'list_webhooks_history_p50', 'list_webhooks_history_p99', 'list_webhooks_saturated_p50', 'list_webhooks_saturated_p99', 'list_webhooks_twin_p50', 'list_webhooks_twin_p99', 'list_vs_bare', 'rest_gateway_ratio', 'rest_gateway_overhead', 'grpc_unary', 'delivery_engine', 'delivery_engine_1000', 'publish_latency_p50', 'publish_latency_p99', 'publish_fan_out', 'memory_growth'];
    figures.sort((x, y) => order.indexOf(x.id) - order.indexOf(y.id));
  } finally {
    await server?.stop();
    await receiver?.stop();
    await pool.end();
    if (!KEEP_DATABASE) await admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`));
  }

  writeResults(machine);
  process.stdout.write(`\n${textTable()}\n\n`);
  if (diagnostics.length > 0) process.stdout.write(`${diagnostics.map((d) => `- ${d}`).join('\n')}\n\n`);
  process.stdout.write(`machine: ${machine.cpuModel} × ${machine.cpuCount}, ${machine.totalMemoryGiB} GiB, Node ${machine.node}, ${machine.postgres.split(' on ')[0]}\n`);
  process.stdout.write(`wrote bench/results.json and bench/results.md (${Math.round(elapsed())} s)\n`);
  if (errors.length > 0) {
    process.stderr.write(`\n${errors.length} figure(s) could not be measured:\n${errors.map((e) => `  - ${e}`).join('\n')}\n`);
    return 1;
  }
  return 0;
}

const watchdog = setTimeout(() => {
  process.stderr.write(`bench: time budget of ${BUDGET_SECONDS} s exceeded; stopping\n`);
  killAllChildren();
  admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`))
    .catch(() => undefined)
    .finally(() => process.exit(2));
}, BUDGET_SECONDS * 1000);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    killAllChildren();
    process.exit(130);
  });
}

main().then(
  (code) => {
    clearTimeout(watchdog);
    process.exit(code);
  },
  (error: unknown) => {
    clearTimeout(watchdog);
    killAllChildren();
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    admin((c) => c.query(`drop database if exists ${DB_NAME} with (force)`))
      .catch(() => undefined)
      .finally(() => process.exit(1));
  },
);
