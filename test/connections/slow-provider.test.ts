import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { startTestApp, type Tenant, type TestApp } from '../support/app';
import { rows } from './flow-helpers';

/**
 * The managed-OAuth provider is called with no transaction open and no pool connection
 * held: twenty completions waiting on a provider that answers only after 10 s (longer
 * than the service waits) leave the rest of the API as fast as ever, and each attempt
 * they could not finish can be completed again once the provider answers.
 */

const API_KEY = 'ak_slow_provider_test';
const COMPLETIONS = 20;
const PROVIDER_DELAY_MS = 10_000;

/** Composio v3, as far as a link and an Instagram identity need it; real HTTP on 127.0.0.1. */
class SlowComposio {
  /** connected account id -> provider user id; a link session creates one. */
  private readonly owners = new Map<string, string>();
  private server: Server | undefined;
  private waiting: { count: number; wanted: number; reached: () => void } | null = null;
  baseUrl = '';
  /** While true, reading a connected account answers only after PROVIDER_DELAY_MS. */
  slow = false;

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.baseUrl = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  /** Resolves once `wanted` account reads are being held. */
  held(wanted: number): Promise<void> {
    return new Promise((reached) => {
      this.waiting = { count: 0, wanted, reached };
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = chunks.length > 0 ? (JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>) : {};
    const url = new URL(req.url ?? '/', 'http://composio.test');
    if (req.headers['x-api-key'] !== API_KEY) return send(res, 401, { error: { message: 'Invalid API key', status: 401 } });

    if (req.method === 'POST' && url.pathname === '/api/v3/connected_accounts/link') {
      const id = `ca_${this.owners.size + 1}`;
      this.owners.set(id, String(body.user_id));
      return send(res, 201, { redirect_url: `https://connect.composio.test/link/${id}`, connected_account_id: id });
    }
    const account = /^\/api\/v3\/connected_accounts\/(ca_\d+)$/.exec(url.pathname)?.[1];
    if (req.method === 'GET' && account && this.owners.has(account)) {
      const answer = () => send(res, 200, { id: account, toolkit: { slug: 'instagram' }, status: 'ACTIVE', is_disabled: false });
      if (!this.slow) return answer();
      if (this.waiting && ++this.waiting.count === this.waiting.wanted) this.waiting.reached();
      setTimeout(answer, PROVIDER_DELAY_MS).unref();
      return;
    }
    if (req.method === 'GET' && url.pathname === '/api/v3/connected_accounts') {
      const id = url.searchParams.get('connected_account_ids') ?? '';
      const owned = this.owners.get(id) === url.searchParams.get('user_ids');
      return send(res, 200, { items: owned ? [{ id }] : [], next_cursor: null });
    }
    if (req.method === 'POST' && url.pathname === '/api/v3/tools/execute/INSTAGRAM_GET_USER_INFO') {
      const id = String(body.connected_account_id).slice('ca_'.length).padStart(3, '0');
      const data = { id: `17841400000009${id}`, username: `slow.${id}`, name: `Slow Bakery ${id}`, profile_picture_url: '' };
      return send(res, 200, { data: { data }, error: null, successful: true, log_id: 'log_slow' });
    }
    send(res, 404, { error: { message: 'Route not found', status: 404 } });
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const provider = new SlowComposio();
let t: TestApp;
beforeAll(async () => {
  await provider.start();
  t = await startTestApp({
    CONNECTION_PROVIDER: 'composio',
    COMPOSIO_API_KEY: API_KEY,
    COMPOSIO_BASE_URL: provider.baseUrl,
    COMPOSIO_AUTH_CONFIG_IDS: 'instagram=ac_ig',
  }, { listen: false });
});
afterAll(async () => {
  await t.close();
  await provider.stop();
});

async function startAttempts(tenant: Tenant): Promise<{ state: string; connectedAccountId: string }[]> {
  const attempts = [];
  for (let i = 0; i < COMPLETIONS; i++) {
    const started = await t.rest('POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram' } });
    expect(started.status).toBe(200);
    attempts.push({ state: started.body.state as string, connectedAccountId: new URL(started.body.redirectUrl as string).pathname.split('/').at(-1)! });
  }
  return attempts;
}

function complete(tenant: Tenant, attempt: { state: string; connectedAccountId: string }) {
  return t.rest('POST', '/api/v1/connections/complete', { apiKey: tenant.apiKey, body: attempt });
}

async function completionEvents(organizationId: string) {
  return rows<{ outcome: string; reason: string | null; n: number }>(
    t,
    `select outcome, reason, count(*)::int as n from audit_events
      where organization_id = ? and action = 'connection.complete' group by outcome, reason`,
    [organizationId],
  );
}

/** Milliseconds a call takes. */
async function timed(call: () => Promise<unknown>): Promise<number> {
  const began = performance.now();
  await call();
  return performance.now() - began;
}

it(
  'delays an unrelated call by under 200 ms while 20 completions wait on a 10 s provider, and leaves their attempts completable',
  async () => {
    const customer = await t.tenant();
    const bystander = await t.tenant();
    const attempts = await startAttempts(customer);
    // The same call with nothing in flight, so the bound measures a delay, not this machine's load.
    const baselineMs = Math.max(...(await Promise.all([0, 1, 2].map(() => timed(() => t.rest('GET', '/api/v1/webhooks', { apiKey: bystander.apiKey }))))));

    provider.slow = true;
    const allHeld = provider.held(COMPLETIONS);
    const completions = attempts.map((attempt) => complete(customer, attempt));
    await allHeld;

    // All twenty are inside the provider call now: none may hold a transaction open meanwhile.
    const open = await rows<{ n: number }>(
      t,
      `select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`,
    );
    expect(open).toEqual([{ n: 0 }]);
    const began = performance.now();
    const unrelated = await t.rest('GET', '/api/v1/webhooks', { apiKey: bystander.apiKey });
    const latencyMs = performance.now() - began;
    expect(unrelated.status).toBe(200);
    // Had the completions held the pool, the call would wait for the provider's 10 s timeout.
    expect(latencyMs - baselineMs).toBeLessThan(200);

    // The service gives up after its 10 s provider timeout: a failure, and nothing claimed.
    const failed = await Promise.all(completions);
    expect(failed.map((answer) => [answer.status, answer.body.code])).toEqual(attempts.map(() => [502, 'PROVIDER_UNAVAILABLE']));
    expect(await completionEvents(customer.organizationId)).toEqual([{ outcome: 'failed', reason: 'PROVIDER_UNAVAILABLE', n: COMPLETIONS }]);
    expect(await rows(t, 'select id from connection_attempts where organization_id = ? and completed_at is not null', [customer.organizationId])).toEqual([]);

    provider.slow = false;
    const completed = await Promise.all(attempts.map((attempt) => complete(customer, attempt)));
    expect(completed.map((answer) => answer.status)).toEqual(attempts.map(() => 200));
    expect(await rows(t, 'select id from connection_attempts where organization_id = ? and completed_at is null', [customer.organizationId])).toEqual([]);
    expect(await rows<{ n: number }>(t, 'select count(*)::int as n from connections where organization_id = ?', [customer.organizationId])).toEqual([
      { n: COMPLETIONS },
    ]);
    expect(await completionEvents(customer.organizationId)).toEqual(
      expect.arrayContaining([
        { outcome: 'failed', reason: 'PROVIDER_UNAVAILABLE', n: COMPLETIONS },
        { outcome: 'succeeded', reason: null, n: COMPLETIONS },
      ]),
    );
  },
  60_000,
);
