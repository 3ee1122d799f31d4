/**
 * The embedded engine's baseline, as a segment server (see child.ts): a plain delivery loop
 * (node, `pg`, keep-alive HTTPS; no framework) that does for each delivery what the
 * contract requires, on its own copy of the delivery tables (`bench_deliveries`,
 * `bench_attempts`: the same columns, checks, indexes and foreign keys, so the running
 * service's engine never sees its rows). Per segment it inserts `amount` pending
 * deliveries, the same rows the engine's segment gets, and drains them with K workers,
 * each taking up to BATCH deliveries at a time:
 *
 * 1. claim: one statement leases due rows (`FOR UPDATE SKIP LOCKED`: two loops never take
 *    the same one; a disabled endpoint or a kill switch is not sent to) and inserts each
 *    one's attempt row (`started_at`), returning its payload and its endpoint's URL and
 *    sealed secret;
 * 2. dispatch: one statement marks the batch's attempts sent and counts them on their
 *    deliveries (`dispatched_at`, `attempt_count`), before any request is written;
 * 3. opens each endpoint's secret (AES-256-GCM, the service's key) and signs each body:
 *    `x-service-timestamp` (unix seconds) and `x-service-signature`, hex HMAC-SHA256 over
 *    `<timestamp>.<body>` keyed with the whole `whsec_` secret;
 * 4. POSTs them over one keep-alive agent (K sockets at most, as the engine's pool);
 * 5. outcome: one statement closes the attempt rows and writes each delivery's status
 *    (delivered, or retrying 30 s later; none after the eighth), clearing the lease.
 *
 * The segment's time runs from the commit of the insert to the last outcome committed,
 * as the engine's does.
 */
import https from 'node:https';
import { createHmac, randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { SecretBox } from '../src/secrets';
import { input, runMain, serveSegments } from './child';
import { insertPending } from './context';

interface Input {
  databaseUrl: string;
  organizationId: string;
  endpointIds: string[];
  caPem: string;
  /** Workers; each holds at most BATCH deliveries; the agent keeps at most this many sockets. */
  workers: number;
  /** The service's secret keys (id → base64), to open the endpoints' sealed secrets. */
  secretKeys: Record<string, string>;
  currentKeyId: string;
  warmupDeliveries: number;
}

const BATCH = 4;
const MAX_ATTEMPTS = 8;
const RETRY_INTERVAL = '30 seconds';
const LEASE = '60 seconds';

const CLAIM = `
with due as (
  select d.id from bench_deliveries d
    join webhook_endpoints e on e.id = d.endpoint_id and e.organization_id = d.organization_id and e.disabled_at is null
   where d.status in ('pending', 'retrying') and d.next_attempt_at <= now()
     and (d.lease_until is null or d.lease_until < now())
     and d.attempt_count < ${MAX_ATTEMPTS}
     and not exists (select 1 from kill_switches k where k.enabled and k.scope in ('global', d.organization_id::text))
   order by d.next_attempt_at
   limit $1
   for update of d skip locked
), leased as (
  update bench_deliveries d set lease_until = now() + interval '${LEASE}', lease_owner = $2
    from due where d.id = due.id
  returning d.id, d.organization_id, d.endpoint_id, d.attempt_count, d.payload
), started as (
  insert into bench_attempts (delivery_id, attempt, started_at)
  select id, attempt_count + 1, now() from leased
  returning delivery_id, attempt
)
select l.id, s.attempt, l.payload, e.id as endpoint_id, e.url, e.secret_key_id, e.secret_ciphertext
  from leased l join started s on s.delivery_id = l.id
  join webhook_endpoints e on e.id = l.endpoint_id`;

const DISPATCH = `
with marked as (
  update bench_attempts a set dispatched_at = now()
    from unnest($1::uuid[], $2::int[]) as v(id, attempt)
   where a.delivery_id = v.id and a.attempt = v.attempt and a.dispatched_at is null and a.finished_at is null
  returning a.delivery_id, a.attempt
)
update bench_deliveries d set attempt_count = marked.attempt, updated_at = now()
  from marked where d.id = marked.delivery_id`;

const OUTCOME = `
with v as (select * from unnest($1::uuid[], $2::int[], $3::int[], $4::text[]) as v(id, attempt, status, error)),
closed as (
  update bench_attempts a set finished_at = now(), response_status = v.status, error = v.error
    from v where a.delivery_id = v.id and a.attempt = v.attempt and a.finished_at is null
  returning a.delivery_id, a.attempt, a.response_status, a.error
)
update bench_deliveries d set
    status = case when closed.error is null then 'delivered' else 'retrying' end,
    attempt_count = closed.attempt, last_error = closed.error, last_response_status = closed.response_status,
    delivered_at = case when closed.error is null then now() else d.delivered_at end,
    next_attempt_at = case when closed.error is null or closed.attempt >= ${MAX_ATTEMPTS} then null else now() + interval '${RETRY_INTERVAL}' end,
    lease_until = null, lease_owner = null, updated_at = now()
  from closed where d.id = closed.delivery_id and d.status in ('pending', 'retrying', 'held')`;

interface Claimed {
  id: string;
  attempt: number;
  payload: string;
  endpoint_id: string;
  url: string;
  secret_key_id: string;
  secret_ciphertext: Buffer;
}

runMain(async () => {
  const spec = input<Input>();
  const owner = randomUUID();
  const pool = new Pool({ connectionString: spec.databaseUrl, max: spec.workers + 1 });
  const box = new SecretBox(new Map(Object.entries(spec.secretKeys).map(([id, key]) => [id, Buffer.from(key, 'base64')])), spec.currentKeyId);
  const agent = new https.Agent({ keepAlive: true, maxSockets: spec.workers, ca: [spec.caPem] });

  const post = (delivery: Claimed) =>
    new Promise<{ status: number | null; error: string | null }>((resolve) => {
      const secret = box.open({ keyId: delivery.secret_key_id, ciphertext: delivery.secret_ciphertext }, delivery.endpoint_id);
      const timestamp = Math.floor(Date.now() / 1000);
      const signature = createHmac('sha256', secret).update(`${timestamp}.${delivery.payload}`).digest('hex');
      const target = new URL(delivery.url);
      const req = https.request({
        method: 'POST',
        host: target.hostname,
        port: Number(target.port),
        path: target.pathname,
        agent,
        headers: {
          'content-type': 'application/json',
          'x-service-timestamp': String(timestamp),
          'x-service-signature': signature,
          'content-length': String(Buffer.byteLength(delivery.payload)),
        },
      });
      req.on('error', (error) => resolve({ status: null, error: error.message }));
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          resolve({ status, error: status >= 200 && status < 300 ? null : `The endpoint answered HTTP ${status}.` });
        });
      });
      req.end(delivery.payload);
    });

  /** One worker: claim, dispatch, sign and send, record; until a claim finds nothing due. */
  const worker = async (): Promise<number> => {
    let delivered = 0;
    for (;;) {
      const { rows } = await pool.query<Claimed>(CLAIM, [BATCH, owner]);
      if (rows.length === 0) return delivered;
      await pool.query(DISPATCH, [rows.map((r) => r.id), rows.map((r) => r.attempt)]);
      const results = await Promise.all(rows.map(post));
      await pool.query(OUTCOME, [rows.map((r) => r.id), rows.map((r) => r.attempt), results.map((r) => r.status), results.map((r) => r.error)]);
      delivered += results.filter((r) => r.error === null).length;
    }
  };

  let run = 0;
  const drain = async (amount: number) => {
    // The copy is new: until autovacuum analyzes it (a minute or more), the planner knows
    // nothing of it and took a nested loop over every endpoint for the claim, walking the
    // dead entries the earlier segments left in the due index (48 ms a claim after five
    // segments of 2,000). The engine's table is analyzed the same way before its segments.
    await pool.query('analyze bench_deliveries, bench_attempts');
    const at = new Date();
    await insertPending(pool, 'bench_deliveries', spec.organizationId, spec.endpointIds, `evt_loop${++run}_`, at, amount);
    const t0 = performance.now();
    const delivered = (await Promise.all(Array.from({ length: spec.workers }, worker))).reduce((a, b) => a + b, 0);
    const seconds = (performance.now() - t0) / 1000;
    return { ok: delivered, errors: amount - delivered, non2xx: 0, seconds, firstError: delivered === amount ? null : `${amount - delivered} deliveries not delivered` };
  };

  await serveSegments({
    warmup: () => drain(spec.warmupDeliveries),
    segment: (command) => drain(command.amount ?? 100),
    cleanup: async () => {
      agent.destroy();
      await pool.end();
    },
  });
});
