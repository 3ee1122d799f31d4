import path from 'node:path';
import { spawn } from 'node:child_process';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { main } from '../../src/operator/cli';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { client, rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';

const ROOT = path.resolve(__dirname, '../..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let t: TestApp;
let receiver: HttpsReceiver;

beforeAll(async () => {
  const tls = await makeTestTls();
  // Deliveries to a receiver that always answers 500 use their 8 attempts in well under a second.
  t = await startTestApp({ DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '20', DELIVERY_TEST_RETRY_INTERVAL_MS: '10' });
  // /ok answers 200; anything else 500.
  receiver = await startHttpsReceiver({ tls, respond: (_, req) => ({ status: req.url === '/ok' ? 200 : 500 }) });
});
afterAll(async () => {
  await receiver?.close();
  await t?.close();
});

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** The operator CLI's main, in this process, against the running test app. */
async function operator(args: string[], env: Record<string, string> = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const status = await main(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken, ...env },
  });
  return { status, stdout, stderr };
}

/** The CLI as people run it (`npm run operator`): the compiled build in a process of its own, writing into a pipe. */
function operatorProcess(args: string[], env: Record<string, string> = {}): Promise<Run & { stdoutBytes: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(path.join(ROOT, 'scripts/with-node.sh'), ['node', 'dist/operator.js', ...args], {
      cwd: ROOT,
      env: { ...process.env, OPERATOR_URL: t.url, OPERATOR_TOKEN: t.config.operatorToken, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const stdout: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (status) => {
      const out = Buffer.concat(stdout);
      resolve({ status, stdout: out.toString('utf8'), stdoutBytes: out.length, stderr });
    });
  });
}

async function operatorJson<T = any>(...args: string[]): Promise<T> {
  const run = await operator([...args, '--json']);
  expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
  return JSON.parse(run.stdout) as T;
}

/** The operator service itself, to see that the CLI really changed the app's state. */
function service() {
  return client(OperatorService, t.url, 'connect', t.config.operatorToken);
}

async function rows<T = any>(sql: string, params: unknown[] = []): Promise<T[]> {
  return t.orm.em.fork().execute<T[]>(sql, params);
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function storedAttemptCount(deliveryId: string): Promise<number> {
  const [row] = await rows<{ count: number }>('select count(*)::int as count from delivery_attempts where delivery_id = ?', [deliveryId]);
  return row!.count;
}

async function deliveryStatus(id: string): Promise<string | undefined> {
  const [row] = await rows<{ status: string }>('select status from webhook_deliveries where id = ?', [id]);
  return row?.status;
}

/** Registers an endpoint on the receiver and sends it a webhook.test; returns the ids. */
async function sendTestDelivery(tenant: Tenant, receiverPath: string): Promise<{ endpointId: string; deliveryId: string; eventId: string }> {
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}${receiverPath}`, eventNames: ['webhook.test'] } });
  expect(created.status).toBe(200);
  const endpointId = created.body.endpoint.id as string;
  const test = await rest(t.url, 'POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
  expect(test.status).toBe(200);
  return { endpointId, deliveryId: test.body.delivery.id, eventId: test.body.delivery.eventId };
}

const requestsTo = (receiverPath: string) => receiver.requests.filter((r) => r.path === receiverPath).length;

describe('kill-switch', () => {
  it('turns an organization switch on and off, and the app holds to it', async () => {
    const tenant = await t.tenant();
    const other = await t.tenant();
    expect(await operatorJson('kill-switch', 'get', '--org', tenant.organizationId)).toEqual({
      organizationId: tenant.organizationId,
      enabled: false,
      reason: '',
    });

    const on = await operatorJson('kill-switch', 'on', '--org', tenant.organizationId, '--reason', 'receiver incident INC-42');
    expect(on).toEqual({ organizationId: tenant.organizationId, enabled: true, reason: 'receiver incident INC-42', updatedAt: expect.any(String) });
    const stored = await service().getKillSwitch({ organizationId: tenant.organizationId });
    expect(stored.killSwitch).toMatchObject({ organizationId: tenant.organizationId, enabled: true, reason: 'receiver incident INC-42' });
    // One organization's switch is not another's, nor the global one.
    expect((await service().getKillSwitch({ organizationId: other.organizationId })).killSwitch?.enabled).toBe(false);
    expect((await service().getKillSwitch({})).killSwitch?.enabled).toBe(false);
    expect(await operatorJson('kill-switch', 'get', '--org', tenant.organizationId)).toMatchObject({ enabled: true, reason: 'receiver incident INC-42' });

    const people = await operator(['kill-switch', 'get', '--org', tenant.organizationId]);
    expect(people.status).toBe(0);
    expect(people.stdout).toContain(`kill switch (organization ${tenant.organizationId}): ON`);
    expect(people.stdout).toContain('reason: receiver incident INC-42');

    // While it is on, a delivery of this organization is held and nothing reaches the receiver:
    // an attempt that finds the switch on writes `held` instead of beginning (no attempt row),
    // and so does every later one while the switch stays on.
    const before = requestsTo('/ok');
    const { deliveryId } = await sendTestDelivery(tenant, '/ok');
    await waitFor('the delivery to be held', async () => (await deliveryStatus(deliveryId)) === 'held');
    expect(await storedAttemptCount(deliveryId)).toBe(0);
    expect(requestsTo('/ok')).toBe(before);

    expect(await operatorJson('kill-switch', 'off', '--org', tenant.organizationId)).toMatchObject({ organizationId: tenant.organizationId, enabled: false });
    expect((await service().getKillSwitch({ organizationId: tenant.organizationId })).killSwitch?.enabled).toBe(false);
    // Off: the held delivery goes out.
    await waitFor('the delivery to go out', async () => (await deliveryStatus(deliveryId)) === 'delivered');
    expect(requestsTo('/ok')).toBe(before + 1);

    const audited = await rows(`select action, target_id from audit_events where organization_id = ? order by id`, [tenant.organizationId]);
    expect(audited).toEqual([
      { action: 'operator.kill_switch.on', target_id: tenant.organizationId },
      { action: 'operator.kill_switch.off', target_id: tenant.organizationId },
    ]);
  });

  it('turns the global switch on and off', async () => {
    try {
      const on = await operatorJson('kill-switch', 'on', '--reason', 'provider outage');
      expect(on).toMatchObject({ organizationId: '', enabled: true, reason: 'provider outage' });
      expect((await service().getKillSwitch({})).killSwitch).toMatchObject({ organizationId: '', enabled: true, reason: 'provider outage' });
      const people = await operator(['kill-switch', 'get']);
      expect(people).toMatchObject({ status: 0, stderr: '' });
      expect(people.stdout).toContain('kill switch (global): ON');
    } finally {
      // Held deliveries would spoil the other tests in this file.
      const off = await operatorJson('kill-switch', 'off');
      expect(off).toMatchObject({ organizationId: '', enabled: false });
    }
    expect((await service().getKillSwitch({})).killSwitch?.enabled).toBe(false);
  });

  it('refuses to switch on without a reason, before calling the service', async () => {
    const tenant = await t.tenant();
    const run = await operator(['kill-switch', 'on', '--org', tenant.organizationId]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/--reason is required/);
    expect((await service().getKillSwitch({ organizationId: tenant.organizationId })).killSwitch?.enabled).toBe(false);
  });

  it('answers ORGANIZATION_NOT_FOUND for an organization that does not exist', async () => {
    const run = await operator(['kill-switch', 'get', '--org', '00000000-0000-4000-8000-000000000000']);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^operator: ORGANIZATION_NOT_FOUND: /);
    expect(run.stdout).toBe('');
  });
});

describe('set-quota', () => {
  it('sets the monthly quota of an enterprise organization', async () => {
    const tenant = await t.tenant({ plan: 'enterprise' });
    expect(await operatorJson('set-quota', '--org', tenant.organizationId, '--monthly', '250000')).toEqual({
      organizationId: tenant.organizationId,
      monthlyDeliveries: '250000',
    });
    const [org] = await rows('select monthly_delivery_quota from organizations where id = ?', [tenant.organizationId]);
    expect(Number(org.monthly_delivery_quota)).toBe(250000);

    const people = await operator(['set-quota', '--org', tenant.organizationId, '--monthly', '0']);
    expect(people).toMatchObject({ status: 0, stderr: '' });
    expect(people.stdout).toContain(`organization ${tenant.organizationId}: 0 deliveries per calendar month`);
    const [after] = await rows('select monthly_delivery_quota from organizations where id = ?', [tenant.organizationId]);
    expect(Number(after.monthly_delivery_quota)).toBe(0);
  });

  it('answers NOT_ENTERPRISE for a scale organization and changes nothing', async () => {
    const tenant = await t.tenant({ plan: 'scale' });
    const run = await operator(['set-quota', '--org', tenant.organizationId, '--monthly', '5']);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^operator: NOT_ENTERPRISE: .*scale/);
    expect(run.stdout).toBe('');
    const asJson = await operator(['set-quota', '--org', tenant.organizationId, '--monthly', '5', '--json']);
    expect(asJson.status).toBe(1);
    expect(JSON.parse(asJson.stderr)).toEqual({ code: 'NOT_ENTERPRISE', message: expect.stringContaining('scale') });
    const [org] = await rows('select monthly_delivery_quota from organizations where id = ?', [tenant.organizationId]);
    expect(org.monthly_delivery_quota).toBeNull();
  });
});

describe('audit', () => {
  it('returns the events of a connection action, with filters', async () => {
    const tenant = await t.tenant();
    const started = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'instagram' } });
    expect(started.status).toBe(200);
    const refused = await rest(t.url, 'POST', '/api/v1/connections/start', { apiKey: tenant.apiKey, body: { toolkit: 'twitter' } });
    expect(refused.body.code).toBe('CAPABILITY_UNSUPPORTED');

    const events = await operatorJson<any[]>('audit', '--org', tenant.organizationId);
    expect(events).toHaveLength(2);
    // Newest first.
    expect(events[0]).toMatchObject({
      organizationId: tenant.organizationId,
      actorUserId: tenant.userId,
      apiKeyId: tenant.keyId,
      action: 'connection.start',
      outcome: 'refused',
      reason: 'CAPABILITY_UNSUPPORTED',
    });
    expect(events[1]).toMatchObject({ action: 'connection.start', outcome: 'succeeded', actorUserId: tenant.userId, occurredAt: expect.any(String) });
    expect(events[1].requestId).toBe(started.headers.get('x-request-id'));

    const limited = await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--limit', '1');
    expect(limited.map((e) => e.id)).toEqual([events[0].id]);
    const filtered = await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--action', 'connection.complete');
    expect(filtered).toEqual([]);
    const future = await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--since', new Date(Date.now() + 3_600_000).toISOString());
    expect(future).toEqual([]);
    const past = await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--since', '2020-01-01', '--until', new Date(Date.now() + 3_600_000).toISOString());
    expect(past).toHaveLength(2);

    const people = await operator(['audit', '--org', tenant.organizationId]);
    expect(people).toMatchObject({ status: 0, stderr: '' });
    expect(people.stdout).toMatch(/connection\.start {2}refused {2}reason CAPABILITY_UNSUPPORTED/);
    expect(people.stdout).toMatch(/connection\.start {2}succeeded/);
  });

  it('reads as many pages as --limit asks for', async () => {
    const tenant = await t.tenant();
    await rows(
      `insert into audit_events (organization_id, action, target_id, outcome, details)
       select ?, 'test.bulk', 'n' || n, 'succeeded', '{}' from generate_series(1, 230) n`,
      [tenant.organizationId],
    );
    const events = await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--limit', '225');
    expect(events).toHaveLength(225);
    expect(new Set(events.map((e) => e.id)).size).toBe(225);
    const ids = events.map((e) => BigInt(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0)));
    expect(await operatorJson<any[]>('audit', '--org', tenant.organizationId, '--limit', '1000')).toHaveLength(230);
  });
});

describe('the compiled CLI, as npm run operator runs it', () => {
  it('writes every byte of a long answer into a pipe and exits 0, or exits 1 with UNAVAILABLE when the service cannot be reached', async () => {
    const tenant = await t.tenant();
    await rows(
      `insert into audit_events (organization_id, action, target_id, outcome, details)
       select ?, 'test.bulk', 'n' || n, 'succeeded', '{}' from generate_series(1, 1500) n`,
      [tenant.organizationId],
    );
    const run = await operatorProcess(['audit', '--org', tenant.organizationId, '--limit', '2000', '--json']);
    expect(run.status).toBe(0);
    // More than a pipe's 64 KiB buffer: a process that exits before stdout drains is cut here.
    expect(run.stdoutBytes).toBeGreaterThan(65_536);
    const events = JSON.parse(run.stdout) as { targetId: string }[];
    expect(events).toHaveLength(1500);
    expect(events.at(-1)?.targetId).toBe('n1');

    // Here and not in-process: connect-node knows Node's network errors by instanceof, which
    // jest's module sandbox defeats, so in-process this refusal would read INTERNAL.
    const unreachable = await operatorProcess(['kill-switch', 'get'], { OPERATOR_URL: 'http://127.0.0.1:1' });
    expect(unreachable.status).toBe(1);
    expect(unreachable.stderr).toMatch(/^operator: UNAVAILABLE: /);
  });
});

describe('dead-letters', () => {
  let tenant: Tenant;
  beforeAll(async () => {
    tenant = await t.tenant();
  });

  it('returns [] and then the delivery that used all its attempts', async () => {
    expect(await operatorJson('dead-letters', '--org', tenant.organizationId)).toEqual([]);
    const people = await operator(['dead-letters', '--org', tenant.organizationId]);
    expect(people).toMatchObject({ status: 0, stdout: 'no dead letters\n' });

    const { endpointId, deliveryId, eventId } = await sendTestDelivery(tenant, '/fail');
    await waitFor('the delivery to be dead-lettered', async () => (await rows('select 1 from dead_letters where delivery_id = ?', [deliveryId])).length > 0);

    const listed = await operatorJson<any[]>('dead-letters', '--org', tenant.organizationId);
    expect(listed).toEqual([
      {
        deliveryId,
        organizationId: tenant.organizationId,
        endpointId,
        eventId,
        eventType: 'webhook.test',
        attemptCount: 8,
        lastError: expect.stringContaining('500'),
        deadLetteredAt: expect.any(String),
        workflowId: `webhook-delivery/${tenant.organizationId}/${endpointId}/${eventId}`,
      },
    ]);
    expect(await operatorJson('dead-letters', '--endpoint', endpointId)).toEqual(listed);
    expect(await operatorJson('dead-letters', '--endpoint', '00000000-0000-4000-8000-000000000000')).toEqual([]);
    expect(await operatorJson('dead-letters', '--org', tenant.organizationId, '--until', '2020-01-01')).toEqual([]);
    expect(await operatorJson('dead-letters', '--org', tenant.organizationId, '--since', listed[0].deadLetteredAt)).toEqual(listed);

    const text = await operator(['dead-letters', '--org', tenant.organizationId]);
    expect(text).toMatchObject({ status: 0, stderr: '' });
    expect(text.stdout).toContain(`delivery ${deliveryId}  webhook.test`);
    expect(text.stdout).toContain('attempts 8');
  });
});

describe('delivery', () => {
  it('shows a dead-lettered delivery with every attempt, by id and by endpoint and event id', async () => {
    const tenant = await t.tenant();
    const { endpointId, deliveryId, eventId } = await sendTestDelivery(tenant, '/lookup-fail');
    await waitFor('the delivery to be dead-lettered', async () => (await deliveryStatus(deliveryId)) === 'dead_lettered');

    const shown = await operatorJson('delivery', deliveryId);
    expect(shown).toMatchObject({
      deliveryId,
      organizationId: tenant.organizationId,
      endpointId,
      eventId,
      status: 'dead_lettered',
      attemptCount: 8,
      deadLettered: true,
      workflowId: `webhook-delivery/${tenant.organizationId}/${endpointId}/${eventId}`,
    });
    expect(shown.attempts).toHaveLength(8);
    expect(shown.attempts.map((a: any) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (const a of shown.attempts) expect(a).toMatchObject({ httpStatus: 500, error: 'The endpoint answered HTTP 500.', dispatchedAt: expect.any(String) });
    expect(await operatorJson('delivery', '--endpoint', endpointId, '--event', eventId)).toEqual(shown);

    const text = await operator(['delivery', deliveryId]);
    expect(text).toMatchObject({ status: 0, stderr: '' });
    expect(text.stdout).toContain(`status dead_lettered (dead-lettered `);
    expect(text.stdout).toContain('#8 ');
    expect(text.stdout).toContain('HTTP 500');
  });

  it('shows a delivery that failed on a disabled endpoint, with its reason and no attempt', async () => {
    const tenant = await t.tenant();
    // Held by the kill switch, the delivery makes no attempt until the endpoint is disabled.
    expect((await operator(['kill-switch', 'on', '--org', tenant.organizationId, '--reason', 'lookup drill'])).status).toBe(0);
    const { endpointId, deliveryId } = await sendTestDelivery(tenant, '/ok');
    await waitFor('the delivery to be held', async () => (await deliveryStatus(deliveryId)) === 'held');
    expect((await rest(t.url, 'DELETE', `/api/v1/webhooks/${endpointId}`, { apiKey: tenant.apiKey })).status).toBe(200);
    expect((await operator(['kill-switch', 'off', '--org', tenant.organizationId])).status).toBe(0);
    await waitFor('the delivery to fail', async () => (await deliveryStatus(deliveryId)) === 'failed');
    const shown = await operatorJson('delivery', deliveryId);
    expect(shown).toMatchObject({ status: 'failed', attemptCount: 0, lastError: 'The endpoint is disabled.', deadLettered: false, attempts: [] });
  });

  it('answers DELIVERY_NOT_FOUND for a delivery that does not exist', async () => {
    const run = await operator(['delivery', '00000000-0000-4000-8000-000000000000']);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^operator: DELIVERY_NOT_FOUND: /);
  });
});

describe('resend, recover and recovery', () => {
  it('resends a dead-lettered delivery of any organization as a new series, audited as an operator action', async () => {
    const tenant = await t.tenant();
    const { endpointId, deliveryId, eventId } = await sendTestDelivery(tenant, '/resend-fail');
    await waitFor('the delivery to be dead-lettered', async () => (await deliveryStatus(deliveryId)) === 'dead_lettered');

    const resent = await operatorJson('resend', deliveryId);
    expect(resent).toMatchObject({ deliveryId, eventId, deadLettered: false, workflowId: `webhook-delivery/${tenant.organizationId}/${endpointId}/${eventId}/series-2` });
    const [audit] = await rows('select organization_id, outcome, target_id from audit_events where action = ?', ['operator.delivery.resend']);
    expect(audit).toEqual({ organization_id: tenant.organizationId, outcome: 'succeeded', target_id: deliveryId });

    await waitFor('the second series to be dead-lettered', async () => (await deliveryStatus(deliveryId)) === 'dead_lettered');
    const shown = await operatorJson('delivery', deliveryId);
    expect(shown.attempts.map((a: any) => [a.series, a.attempt])).toEqual([1, 2].flatMap((series) => [1, 2, 3, 4, 5, 6, 7, 8].map((attempt) => [series, attempt])));
    expect(shown.attempts[15]).toMatchObject({ errorClass: 'http_status', httpStatus: 500 });
    expect(requestsTo('/resend-fail')).toBe(16);
  });

  it('counts a window in a dry run, recovers it once and shows the job', async () => {
    const tenant = await t.tenant();
    const since = new Date(Date.now() - 60_000).toISOString();
    const { endpointId, deliveryId } = await sendTestDelivery(tenant, '/recover-fail');
    await waitFor('the delivery to be dead-lettered', async () => (await deliveryStatus(deliveryId)) === 'dead_lettered');

    expect(await operatorJson('recover', '--endpoint', endpointId, '--since', since, '--dry-run')).toEqual({ organizationId: tenant.organizationId, found: 1, dryRun: true });
    const asked = await operatorJson('recover', '--endpoint', endpointId, '--since', since);
    expect(asked).toMatchObject({ organizationId: tenant.organizationId, endpointId, found: 1, replayed: false });
    const job = await waitFor('the job to finish', async () => {
      const read = await operatorJson('recovery', asked.id);
      return read.state === 'finished' ? read : undefined;
    });
    expect(job).toMatchObject({ resent: 1, found: 1 });
    expect(await operatorJson('recover', '--endpoint', endpointId, '--since', since)).toMatchObject({ id: asked.id, replayed: true });
    const [series] = await rows<{ series: number }>('select series from webhook_deliveries where id = ?', [deliveryId]);
    expect(series).toEqual({ series: 2 });
    // The dry run, the recovery and its replay: each audited (README "When your endpoint was down").
    expect(await rows('select outcome, target_id from audit_events where organization_id = ? and action = ?', [tenant.organizationId, 'operator.webhook.recover'])).toEqual([
      { outcome: 'succeeded', target_id: endpointId },
      { outcome: 'succeeded', target_id: endpointId },
      { outcome: 'succeeded', target_id: endpointId },
    ]);
    const text = await operator(['recovery', asked.id]);
    expect(text.stdout).toContain(`recovery ${asked.id}  finished`);
  });

  it('refuses a resend of a held delivery and a window over 14 days', async () => {
    const tenant = await t.tenant();
    expect((await operator(['kill-switch', 'on', '--org', tenant.organizationId, '--reason', 'resend drill'])).status).toBe(0);
    const { endpointId, deliveryId } = await sendTestDelivery(tenant, '/ok');
    await waitFor('the delivery to be held', async () => (await deliveryStatus(deliveryId)) === 'held');
    const refused = await operator(['resend', deliveryId]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/^operator: DELIVERY_NOT_RESENDABLE: /);
    const long = await operator(['recover', '--endpoint', endpointId, '--since', '2026-01-01', '--until', '2026-02-01']);
    expect(long.status).toBe(1);
    expect(long.stderr).toMatch(/^operator: RECOVERY_WINDOW_TOO_LONG: /);
    expect((await operator(['recover', '--endpoint', endpointId])).status).toBe(2);
    expect((await operator(['kill-switch', 'off', '--org', tenant.organizationId])).status).toBe(0);
  });
});

describe('credentials and usage', () => {
  it('exits 1 with OPERATOR_CREDENTIAL_REQUIRED on a wrong token', async () => {
    const run = await operator(['kill-switch', 'get'], { OPERATOR_TOKEN: 'not-the-operator-token-but-long-enough-0000' });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^operator: OPERATOR_CREDENTIAL_REQUIRED: /);
    expect(run.stdout).toBe('');
  });

  it('refuses a customer API key as the operator token without sending it', async () => {
    const tenant = await t.tenant();
    const run = await operator(['kill-switch', 'get'], { OPERATOR_TOKEN: tenant.apiKey });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain('customer API key');
    expect(run.stderr).not.toContain(tenant.apiKey);
  });

  const bad: { name: string; args: string[]; message: RegExp }[] = [
    { name: 'no command', args: [], message: /a command is required/ },
    { name: 'an unknown command', args: ['purge'], message: /unknown command "purge"/ },
    { name: 'kill-switch without a verb', args: ['kill-switch'], message: /get, on or off/ },
    { name: 'an unknown kill-switch verb', args: ['kill-switch', 'toggle'], message: /unknown kill-switch command "toggle"/ },
    { name: 'an extra argument', args: ['audit', 'now'], message: /unexpected argument "now"/ },
    { name: 'an unknown option', args: ['audit', '--orgs', 'x'], message: /--orgs/ },
    { name: 'an option of another command', args: ['audit', '--monthly', '5'], message: /audit takes no --monthly/ },
    { name: 'an organization id that is not an id', args: ['kill-switch', 'get', '--org', 'acme'], message: /--org must be an id/ },
    { name: 'an endpoint id that is not an id', args: ['dead-letters', '--endpoint', 'ep_1'], message: /--endpoint must be an id/ },
    { name: 'a date that is not ISO 8601', args: ['audit', '--since', 'yesterday'], message: /--since must be an ISO 8601/ },
    { name: 'an impossible date', args: ['dead-letters', '--until', '2026-02-30'], message: /--until must be an ISO 8601/ },
    { name: 'a month that does not exist', args: ['audit', '--since', '2026-13-01T10:00'], message: /--since must be an ISO 8601/ },
    { name: 'a command named like an object property', args: ['constructor'], message: /unknown command "constructor"/ },
    { name: 'since after until', args: ['audit', '--since', '2026-02-01', '--until', '2026-01-01'], message: /--since must be before --until/ },
    { name: 'a limit that is not a number', args: ['audit', '--limit', 'ten'], message: /--limit must be a whole number/ },
    { name: 'a zero limit', args: ['dead-letters', '--limit', '0'], message: /--limit must be a whole number/ },
    { name: 'set-quota without --org', args: ['set-quota', '--monthly', '5'], message: /--org is required/ },
    { name: 'set-quota without --monthly', args: ['set-quota', '--org', '00000000-0000-4000-8000-000000000000'], message: /--monthly is required/ },
    { name: 'a negative quota', args: ['set-quota', '--org', '00000000-0000-4000-8000-000000000000', '--monthly=-1'], message: /--monthly must be a whole number/ },
    { name: 'an empty reason', args: ['kill-switch', 'on', '--reason', '  '], message: /--reason must not be empty/ },
    { name: 'delivery with nothing to find it by', args: ['delivery'], message: /delivery needs a delivery id/ },
    { name: 'delivery with an endpoint but no event', args: ['delivery', '--endpoint', '00000000-0000-4000-8000-000000000000'], message: /delivery needs a delivery id/ },
    { name: 'delivery with an id and an endpoint', args: ['delivery', '00000000-0000-4000-8000-000000000000', '--endpoint', '00000000-0000-4000-8000-000000000000', '--event', 'e'], message: /not both/ },
    { name: 'a delivery id that is not an id', args: ['delivery', 'dlv_1'], message: /the delivery id must be an id/ },
    { name: 'delivery with two ids', args: ['delivery', '00000000-0000-4000-8000-000000000000', 'x'], message: /unexpected argument "x"/ },
  ];

  it.each(bad)('exits 2 with usage on $name', async ({ args, message }) => {
    const before = await rows<{ n: string }>('select count(*) as n from audit_events');
    const run = await operator([...args, '--json']);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).toContain('usage: npm run operator');
    expect(run.stdout).toBe('');
    expect(await rows('select count(*) as n from audit_events')).toEqual(before);
  });

  it('exits 2 on a malformed OPERATOR_URL', async () => {
    const run = await operator(['kill-switch', 'get'], { OPERATOR_URL: 'localhost:8080' });
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/OPERATOR_URL must be an http\(s\) URL/);
  });

  it('uses the configuration default token when OPERATOR_TOKEN is unset', async () => {
    // The test app runs with the development default, which the CLI reads through loadConfig().
    const run = await operator(['kill-switch', 'get', '--json'], { OPERATOR_TOKEN: '' });
    expect(run).toMatchObject({ status: 0, stderr: '' });
    expect(JSON.parse(run.stdout)).toMatchObject({ organizationId: '', enabled: false });
  });
});
