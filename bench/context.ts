/**
 * The world the figures run in: the service, the receiver, the seeded organizations and
 * their endpoints, and the HTTP and seeding helpers the figures share.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pool } from 'pg';
import type { TestTls } from '../test/support/tls';
import { openDatabase, databaseAt } from '../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../src/auth';
import { baseEnv, startChild, type Child } from './lib';
import { DATABASE_URL } from './harness';

export const LIST_ENDPOINTS = 50;
export const OTHER_ORGS = 5;
export const OTHER_ENDPOINTS_PER_ORG = 10;
export const DELIVERY_ENDPOINTS = 16;
export const LISTED_CONNECTIONS = 10;
export const INTERNAL_TOKEN = 'bench-internal-service-token-0123456789abcdef';
/** How often the service's engine looks for due deliveries nobody woke it for (DELIVERY_POLL_INTERVAL_MS). */
export const POLL_INTERVAL_MS = 20;

export interface Tenant {
  organizationId: string;
  apiKey: string;
}

export interface Context {
  tls: TestTls;
  pool: Pool;
  server: Child<{ url: string }>;
  receiver: Child<{ url: string }>;
  tenants: Record<string, Tenant>;
  /** The 50 endpoints of the listed organization, of its twin (same answer, no history) and of the empty one (no deliveries). */
  listEndpointIds: string[];
  twinEndpointIds: string[];
  emptyEndpointIds: string[];
  otherEndpoints: { organizationId: string; id: string }[];
  deliveryEndpointIds: string[];
  serverEnv: Record<string, string>;
}

export async function api(
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

export async function expectOk(call: Promise<{ status: number; json: any; text: string }>, what: string): Promise<any> {
  const { status, json, text } = await call;
  if (status !== 200) throw new Error(`${what}: HTTP ${status} ${text.slice(0, 300)}`);
  return json;
}

/** Reads metric values from the Prometheus text of /metrics. */
export async function scrapeMetrics(baseUrl: string, names: string[]): Promise<number[]> {
  const response = await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(30_000) });
  const lines = (await response.text()).split('\n');
  return names.map((name) => {
    const line = lines.find((l) => l.startsWith(`${name} `));
    if (!line) throw new Error(`/metrics has no ${name}`);
    return Number(line.slice(name.length + 1).trim());
  });
}

export async function seedTenants(names: string[]): Promise<Record<string, Tenant>> {
  const orm = await openDatabase(databaseAt(DATABASE_URL), { pool: { min: 0, max: 2 } });
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
export async function createEndpoints(baseUrl: string, tenant: Tenant, urls: string[], eventNames = ['webhook.test']): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < urls.length; i += 8) {
    const batch = await Promise.all(
      urls.slice(i, i + 8).map((url) => expectOk(api(baseUrl, 'POST', '/api/v1/webhooks', tenant.apiKey, { url, eventNames }), 'create endpoint')),
    );
    ids.push(...batch.map((r: { endpoint: { id: string } }) => r.endpoint.id));
  }
  return ids;
}

export async function insertConnections(pool: Pool, organizationId: string, count: number): Promise<void> {
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

function writeCaFile(pem: string): string {
  const file = path.join(os.tmpdir(), `publishing-bench-ca-${process.pid}.pem`);
  fs.writeFileSync(file, pem);
  return file;
}

export function serverEnvOf(tls: TestTls): Record<string, string> {
  return baseEnv({
    NODE_ENV: 'test',
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL,
    DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
    // Trusted the way production adds a CA: Node loads it into its default store once.
    NODE_EXTRA_CA_CERTS: writeCaFile(tls.caPem),
    LOG_LEVEL: 'silent',
    DELIVERY_POLL_INTERVAL_MS: String(POLL_INTERVAL_MS),
    INTERNAL_SERVICE_TOKENS: `bench:${INTERNAL_TOKEN}`,
  });
}

/** The bare node:http + pg server (bare-rest.ts), knowing the API keys of the given tenants. */
export function startBareRest(tenants: Tenant[]): Promise<Child<{ url: string }>> {
  return startChild<{ url: string }>('bare-rest.ts', {
    databaseUrl: DATABASE_URL,
    organizations: Object.fromEntries(tenants.map((t) => [t.apiKey, t.organizationId])),
  });
}

/** The delivery row columns every bench insert writes, in this order. */
export const DELIVERY_COLUMNS = `(id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, next_attempt_at,
        last_error, last_response_status, workflow_id, lease_until, delivered_at, created_at, updated_at)`;

/**
 * Inserts n pending webhook.test deliveries into `table` (webhook_deliveries, or the durable
 * loop's copy of it), round-robin over `endpointIds`, event ids `<tag><n>`, all created at `at`.
 */
export async function insertPending(pool: { query(text: string, values: unknown[]): Promise<unknown> }, table: string, organizationId: string, endpointIds: string[], tag: string, at: Date, n: number): Promise<void> {
  await pool.query(
    `insert into ${table} ${DELIVERY_COLUMNS}
     select gen_random_uuid(), $1::uuid, e.id, e.evt, 'webhook.test',
            '{"id":"' || e.evt || '","type":"webhook.test","createdAt":"' || $4::text || '","data":{"endpointId":"' || e.id
              || '","message":"This is a test delivery from the publishing platform."}}',
            'pending', 0, $5, null, null, 'webhook-delivery/' || $1::text || '/' || e.id || '/' || e.evt, null, null, $5, $5
       from (select ($2::uuid[])[1 + g % cardinality($2::uuid[])] as id, $3::text || lpad(g::text, 6, '0') as evt
               from generate_series(1, $6::int) g) e`,
    [organizationId, endpointIds, tag, at.toISOString(), at, n],
  );
}
