/**
 * The reference for the list and create figures: what a user would write without this
 * service's layers. A bare `node:http` server with a `pg` pool of the service's size (10)
 * that answers GET /api/v1/webhooks with the service's two queries (the organization's
 * first page of endpoints, then the lateral join for their five newest deliveries, the
 * same SQL) and `JSON.stringify`, and POST /api/v1/webhooks with the service's one insert
 * after sealing a new secret with AES-256-GCM. The API key is a constant mapped to its
 * organization (the service keeps its keys in a cache); no validation beyond an https URL.
 */
import { createCipheriv, randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { emit, input, onStop, runMain } from './child';

interface Input {
  databaseUrl: string;
  /** Bearer key → organization id. */
  organizations: Record<string, string>;
}

const PAGE_SIZE = 50;

const LIST_ENDPOINTS = `select id, url, description, event_names, disabled_at, created_at
  from webhook_endpoints where organization_id = $1 order by created_at asc, id asc limit $2`;

const epochMs = (column: string) => `floor(extract(epoch from ${column}) * 1000)::float8`;
const LIST_RECENT = `select d.* from webhook_endpoints as e
  inner join lateral (
    select w.id, w.endpoint_id as "endpointId", w.event_id as "eventId", w.event_type as "eventType", w.status,
           w.attempt_count as "attemptCount", ${epochMs('w.next_attempt_at')} as "nextAttemptAtMs", w.last_error as "lastError",
           w.last_response_status as "lastResponseStatus", w.workflow_id as "workflowId", ${epochMs('w.delivered_at')} as "deliveredAtMs",
           ${epochMs('w.created_at')} as "createdAtMs", ${epochMs('w.updated_at')} as "updatedAtMs", w.created_at as "sortAt"
      from webhook_deliveries as w where w.endpoint_id = e.id order by w.created_at desc, w.id desc limit 5
  ) as d on true
  where e.id = any($1::uuid[])
  order by d."endpointId", d."sortAt" desc, d.id desc`;

const INSERT = `insert into webhook_endpoints
  (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
  values ($1, $2, $3, $4, $5::text[], $6, $7, $8, $9)`;

interface EndpointRow {
  id: string;
  url: string;
  description: string;
  event_names: string[];
  disabled_at: Date | null;
  created_at: Date;
}

interface DeliveryRow {
  endpointId: string;
  nextAttemptAtMs: number | null;
  deliveredAtMs: number | null;
  createdAtMs: number;
  updatedAtMs: number;
  sortAt?: Date;
  [column: string]: unknown;
}

const iso = (ms: number | null) => (ms === null ? undefined : new Date(ms).toISOString());

runMain(async () => {
  const spec = input<Input>();
  const pool = new Pool({ connectionString: spec.databaseUrl, max: 10 });
  const key = randomBytes(32);

  const list = async (organizationId: string) => {
    const endpoints = (await pool.query<EndpointRow>(LIST_ENDPOINTS, [organizationId, PAGE_SIZE])).rows;
    const recent = new Map<string, unknown[]>(endpoints.map((e) => [e.id, []]));
    if (endpoints.length > 0) {
      const rows = (await pool.query<DeliveryRow>(LIST_RECENT, [endpoints.map((e) => e.id)])).rows;
      for (const { sortAt: _, nextAttemptAtMs, deliveredAtMs, createdAtMs, updatedAtMs, ...same } of rows) {
        recent.get(same.endpointId)?.push({
          ...same,
          nextAttemptAt: iso(nextAttemptAtMs),
          deliveredAt: iso(deliveredAtMs),
          createdAt: iso(createdAtMs),
          updatedAt: iso(updatedAtMs),
        });
      }
    }
    return {
      endpoints: endpoints.map((e) => ({
        id: e.id,
        url: e.url,
        description: e.description,
        eventNames: e.event_names,
        disabled: e.disabled_at !== null,
        createdAt: e.created_at.toISOString(),
        recentDeliveries: recent.get(e.id),
      })),
    };
  };

  const create = async (organizationId: string, body: string) => {
    const request = JSON.parse(body) as { url?: string; description?: string; eventNames?: string[] };
    if (!request.url?.startsWith('https://')) return null;
    const id = randomUUID();
    const secret = `whsec_${randomBytes(32).toString('base64url')}`;
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', key, nonce);
    cipher.setAAD(Buffer.from(id));
    const sealed = Buffer.concat([nonce, cipher.update(secret), cipher.final(), cipher.getAuthTag()]);
    const now = new Date();
    const eventNames = request.eventNames ?? [];
    await pool.query(INSERT, [id, organizationId, request.url, request.description ?? '', eventNames, 'bench', sealed, now, now]);
    return { endpoint: { id, url: request.url, description: request.description ?? '', eventNames, disabled: false, createdAt: now.toISOString() }, signingSecret: secret };
  };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const answer = (status: number, value: unknown) => {
        const text = JSON.stringify(value);
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      };
      const organizationId = spec.organizations[(req.headers.authorization ?? '').replace(/^Bearer /, '')];
      if (!organizationId) return answer(401, { code: 'UNAUTHENTICATED' });
      if (!req.url?.startsWith('/api/v1/webhooks')) return answer(404, { code: 'NOT_FOUND' });
      const work = req.method === 'POST' ? create(organizationId, Buffer.concat(chunks).toString('utf8')) : list(organizationId);
      work.then(
        (value) => (value ? answer(200, value) : answer(400, { code: 'INVALID_URL' })),
        (error: unknown) => answer(500, { code: 'INTERNAL', message: String(error) }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onStop(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await pool.end();
  });
  emit({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, pid: process.pid });
});
