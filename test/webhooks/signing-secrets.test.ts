/**
 * Signature schemes and secret rotation through the API: what each route answers, what
 * it stores, what the list shows, and what it refuses, on REST and gRPC. What receivers get
 * is in test/delivery/signing-schemes.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { Code } from '@connectrpc/connect';
import { Webhook } from 'standardwebhooks';
import { startTestApp, type TestApp, type Tenant } from '../support/app';
import { createLogger } from '../../src/config/logger';
import { WebhookService } from '../../src/gen/publishing/v1/webhook_service_pb';
import { failureOf } from '../support/clients';

const DAY_MS = 24 * 60 * 60 * 1000;
const good = 'https://127.0.0.1:9/hook';

/** The service's clock, moved by the tests instead of waiting. */
let offsetMs = 0;
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({}, { listen: false, now: () => Date.now() + offsetMs });
});
afterAll(async () => t?.close());
beforeEach(() => {
  offsetMs = 0;
});

interface StoredEndpoint {
  url: string;
  description: string;
  event_names: string[];
  signature_scheme: string;
  secret_key_id: string;
  secret_ciphertext: Buffer;
  previous_secret_key_id: string | null;
  previous_secret_ciphertext: Buffer | null;
  previous_signature_scheme: string | null;
  rotation_started_at: string | null;
  rotation_ends_at: string | null;
  /** The two times above as epoch milliseconds (the driver hands timestamps over as text). */
  started_ms: number | null;
  ends_ms: number | null;
}

async function stored(id: string): Promise<StoredEndpoint> {
  const [row] = await t.orm.em.fork().execute<StoredEndpoint[]>(
    `select *, (extract(epoch from rotation_started_at) * 1000)::float8 as started_ms, (extract(epoch from rotation_ends_at) * 1000)::float8 as ends_ms
       from webhook_endpoints where id = ?`,
    [id],
  );
  return row!;
}

async function listed(tenant: Tenant, id: string): Promise<any> {
  const list = await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey });
  expect(list.status).toBe(200);
  expect(JSON.stringify(list.body)).not.toMatch(/whsec_/);
  return list.body.endpoints.find((e: any) => e.id === id);
}

async function created(tenant: Tenant, body: Record<string, unknown> = {}): Promise<{ id: string; secret: string }> {
  const res = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good, ...body } });
  expect(res.status).toBe(200);
  return { id: res.body.endpoint.id, secret: res.body.signingSecret };
}

async function auditOf(organizationId: string): Promise<{ action: string; target_id: string; outcome: string; reason: string | null; details: unknown }[]> {
  return t.orm.em
    .fork()
    .execute("select action, target_id, outcome, reason, details from audit_events where organization_id = ? and action like 'webhook.%' order by id", [organizationId]);
}

function standardKeyLength(secret: string): number {
  return Buffer.from(secret.slice('whsec_'.length), 'base64').length;
}

describe('the signature scheme of a new endpoint', () => {
  it('is legacy unless asked, with a secret in the seed form', async () => {
    const tenant = await t.tenant();
    const { id, secret } = await created(tenant);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(await listed(tenant, id)).toMatchObject({ signatureScheme: 'legacy' });
    expect((await listed(tenant, id)).secretRotation).toBeUndefined();
  });

  it.each(['standard', 'both'])('%s: a Standard Webhooks secret that the reference library takes', async (scheme) => {
    const tenant = await t.tenant();
    const { id, secret } = await created(tenant, { signatureScheme: scheme });
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(standardKeyLength(secret)).toBe(32);
    expect(() => new Webhook(secret)).not.toThrow();
    expect(await listed(tenant, id)).toMatchObject({ signatureScheme: scheme });
    expect((await stored(id)).signature_scheme).toBe(scheme);
  });

  it('refuses an unknown scheme on REST and gRPC, storing nothing', async () => {
    const tenant = await t.tenant();
    const res = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good, signatureScheme: 'hmac' } });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'SIGNATURE_SCHEME_INVALID' });
    const failure = await failureOf(t.client(WebhookService, tenant.apiKey).createWebhook({ url: good, signatureScheme: 'Standard' }));
    expect(failure).toEqual({ code: Code.InvalidArgument, reason: 'SIGNATURE_SCHEME_INVALID' });
    const [count] = await t.orm.em.fork().execute('select count(*)::int as n from webhook_endpoints where organization_id = ?', [tenant.organizationId]);
    expect(count!.n).toBe(0);
  });
});

describe('rotating the signing secret', () => {
  it('answers a new secret once, keeps the old one sealed until the overlap ends (24 h by default), and lists the rotation', async () => {
    const tenant = await t.tenant();
    const { id, secret } = await created(tenant);
    const before = await stored(id);
    const started = Date.now();
    const res = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: {} });
    expect(res.status).toBe(200);
    const next = res.body.signingSecret as string;
    expect(next).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(next).not.toBe(secret);

    const row = await stored(id);
    // The old secret moved over sealed as it was; the new one is sealed too, never stored in clear.
    expect(row.previous_secret_ciphertext).toEqual(before.secret_ciphertext);
    expect(row.previous_secret_key_id).toBe(before.secret_key_id);
    expect(row.secret_ciphertext).not.toEqual(before.secret_ciphertext);
    for (const sealed of [row.secret_ciphertext, row.previous_secret_ciphertext!]) {
      expect(sealed.includes(Buffer.from(next))).toBe(false);
      expect(sealed.includes(Buffer.from(secret))).toBe(false);
    }
    expect(row.previous_signature_scheme).toBe('legacy');
    const endsAt = row.ends_ms!;
    expect(endsAt - row.started_ms!).toBe(DAY_MS);
    expect(row.started_ms!).toBeGreaterThanOrEqual(started - 1000);

    const shown = { startedAt: new Date(row.started_ms!).toISOString(), endsAt: new Date(endsAt).toISOString(), previousSignatureScheme: 'legacy' };
    expect(res.body.endpoint.secretRotation).toEqual(shown);
    expect(await listed(tenant, id)).toMatchObject({ signatureScheme: 'legacy', secretRotation: shown });

    // A millisecond before the end it still runs; at the end it is over, with nothing run meanwhile.
    offsetMs = endsAt - Date.now() - 1000;
    expect((await listed(tenant, id)).secretRotation).toEqual(shown);
    offsetMs = endsAt - Date.now();
    expect((await listed(tenant, id)).secretRotation).toBeUndefined();
  });

  it('takes the overlap in seconds, at most 7 days; 0 stops the old secret at once', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const week = await t.client(WebhookService, tenant.apiKey).rotateWebhookSecret({ id, overlapSeconds: 7 * 24 * 3600 });
    const row = await stored(id);
    expect(row.ends_ms! - row.started_ms!).toBe(7 * DAY_MS);
    expect(week.endpoint?.secretRotation?.previousSignatureScheme).toBe('legacy');

    offsetMs = 7 * DAY_MS;
    const now = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 0 } });
    expect(now.status).toBe(200);
    expect(now.body.endpoint.secretRotation).toBeUndefined();
    expect(await stored(id)).toMatchObject({ previous_secret_key_id: null, previous_secret_ciphertext: null, previous_signature_scheme: null, rotation_ends_at: null });
  });

  it.each([
    ['more than 7 days', 7 * 24 * 3600 + 1],
    ['negative', -1],
  ])('refuses an overlap of %s with ROTATION_OVERLAP_INVALID, changing nothing', async (_name, overlapSeconds) => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const before = await stored(id);
    const res = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds } });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'ROTATION_OVERLAP_INVALID' });
    expect(await failureOf(t.client(WebhookService, tenant.apiKey).rotateWebhookSecret({ id, overlapSeconds }))).toEqual({
      code: Code.InvalidArgument,
      reason: 'ROTATION_OVERLAP_INVALID',
    });
    expect(await stored(id)).toEqual(before);
  });

  it('refuses a second rotation while the overlap runs (SECRET_ROTATION_IN_PROGRESS), and takes one once it ended', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const first = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 3600 } });
    expect(first.status).toBe(200);
    const during = await stored(id);

    const again = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 0 } });
    expect({ status: again.status, code: again.body.code }).toEqual({ status: 409, code: 'SECRET_ROTATION_IN_PROGRESS' });
    expect(again.body.details).toEqual({ endsAt: first.body.endpoint.secretRotation.endsAt });
    expect(await failureOf(t.client(WebhookService, tenant.apiKey).rotateWebhookSecret({ id }))).toEqual({
      code: Code.FailedPrecondition,
      reason: 'SECRET_ROTATION_IN_PROGRESS',
    });
    expect(await stored(id)).toEqual(during);

    offsetMs = 3600 * 1000;
    const after = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: {} });
    expect(after.status).toBe(200);
    // The secret of the first rotation is the one that now keeps signing through the new overlap.
    expect((await stored(id)).previous_secret_ciphertext).toEqual(during.secret_ciphertext);
  });

  it("finds only the caller's organization's endpoints, and refuses a disabled one", async () => {
    const owner = await t.tenant();
    const stranger = await t.tenant();
    const { id } = await created(owner);
    const before = await stored(id);
    for (const target of [id, randomUUID(), 'not-a-uuid']) {
      const res = await t.rest('POST', `/api/v1/webhooks/${target}/rotate-secret`, { apiKey: stranger.apiKey, body: {} });
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 404, code: 'WEBHOOK_NOT_FOUND' });
    }
    expect(await failureOf(t.client(WebhookService, stranger.apiKey).updateWebhook({ id, description: 'mine now' }))).toEqual({
      code: Code.NotFound,
      reason: 'WEBHOOK_NOT_FOUND',
    });
    expect(await stored(id)).toEqual(before);

    expect((await t.rest('DELETE', `/api/v1/webhooks/${id}`, { apiKey: owner.apiKey })).status).toBe(200);
    const disabled = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: owner.apiKey, body: {} });
    expect({ status: disabled.status, code: disabled.body.code }).toEqual({ status: 409, code: 'WEBHOOK_DISABLED' });
  });

  it('needs webhooks:write in both the key and the role', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const member = await tenant.colleague('member');
    const res = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: member.apiKey, body: {} });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 403, code: 'PERMISSION_DENIED' });
    const scopeless = await tenant.colleague('admin', ['connections:read']);
    const patched = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: scopeless.apiKey, body: { description: 'x' } });
    expect({ status: patched.status, code: patched.body.code }).toEqual({ status: 403, code: 'SCOPE_MISSING' });
  });

  it('audits rotations and updates, refusals included, never with a secret', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const rotated = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 60 } });
    const refused = await t.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: {} });
    const updated = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { description: 'renamed' } });
    expect([rotated.status, refused.status, updated.status]).toEqual([200, 409, 200]);
    const events = await auditOf(tenant.organizationId);
    expect(events).toEqual([
      { action: 'webhook.rotate_secret', target_id: id, outcome: 'succeeded', reason: null, details: expect.objectContaining({ overlapSeconds: 60 }) },
      { action: 'webhook.rotate_secret', target_id: id, outcome: 'refused', reason: 'SECRET_ROTATION_IN_PROGRESS', details: expect.anything() },
      { action: 'webhook.update', target_id: id, outcome: 'succeeded', reason: null, details: expect.objectContaining({ changed: ['description'] }) },
    ]);
    expect(JSON.stringify(events)).not.toMatch(/whsec_/);
  });
});

describe('UpdateWebhook', () => {
  it('changes only the fields it is given, keeping the secret', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant, { description: 'first', eventNames: ['post.held'] });
    const before = await stored(id);
    const res = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { url: 'https://127.0.0.1:9/other' } });
    expect(res.status).toBe(200);
    expect(res.body.signingSecret ?? '').toBe('');
    expect(res.body.endpoint).toMatchObject({ url: 'https://127.0.0.1:9/other', description: 'first', eventNames: ['post.held'], signatureScheme: 'legacy' });

    const grpc = await t.client(WebhookService, tenant.apiKey).updateWebhook({ id, description: '', eventNames: ['post.held', 'post.released'] });
    expect(grpc.signingSecret).toBe('');
    expect(grpc.endpoint).toMatchObject({ url: 'https://127.0.0.1:9/other', description: '', eventNames: ['post.held', 'post.released'] });
    const row = await stored(id);
    expect(row).toMatchObject({ url: 'https://127.0.0.1:9/other', description: '', event_names: ['post.held', 'post.released'], signature_scheme: 'legacy' });
    expect(row.secret_ciphertext).toEqual(before.secret_ciphertext);

    // The same scheme again is no change: no secret, no rotation.
    const same = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { signatureScheme: 'legacy' } });
    expect(same.status).toBe(200);
    expect(same.body.signingSecret ?? '').toBe('');
    expect((await stored(id)).secret_ciphertext).toEqual(before.secret_ciphertext);
  });

  const refusals: [string, Record<string, unknown>, string][] = [
    ['http://', { url: 'http://127.0.0.1:9/hook' }, 'WEBHOOK_URL_NOT_HTTPS'],
    ['empty url', { url: '' }, 'WEBHOOK_URL_REQUIRED'],
    ['credentials', { url: 'https://user:pass@127.0.0.1:9/hook' }, 'WEBHOOK_URL_HAS_CREDENTIALS'],
    ['2049-char url', { url: `https://127.0.0.1:9/${'a'.repeat(2049 - 'https://127.0.0.1:9/'.length)}` }, 'WEBHOOK_URL_TOO_LONG'],
    ['501-char description', { description: 'd'.repeat(501) }, 'WEBHOOK_DESCRIPTION_TOO_LONG'],
    ['bad event name', { eventNames: ['Bad Name'] }, 'EVENT_NAME_INVALID'],
    ['21 event names', { eventNames: Array.from({ length: 21 }, (_, i) => `event.n${i}`) }, 'TOO_MANY_EVENT_NAMES'],
    ['unknown scheme', { signatureScheme: 'v2' }, 'SIGNATURE_SCHEME_INVALID'],
    ['overlap of 8 days', { signatureScheme: 'standard', overlapSeconds: 8 * 24 * 3600 }, 'ROTATION_OVERLAP_INVALID'],
  ];

  it.each(refusals)('refuses %s as create does, on REST and gRPC, changing nothing', async (_name, body, code) => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const before = await stored(id);
    const res = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { description: 'changed', ...body } });
    expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code });
    expect(await failureOf(t.client(WebhookService, tenant.apiKey).updateWebhook({ id, description: 'changed', ...body }))).toEqual({
      code: Code.InvalidArgument,
      reason: code,
    });
    expect(await stored(id)).toEqual(before);
  });

  it('refuses internal addresses that the address filter does not allow', async () => {
    const strict = await startTestApp({ DELIVERY_ALLOW_CIDRS: '' }, { listen: false });
    try {
      const tenant = await strict.tenant();
      const made = await strict.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
      expect(made.status).toBe(200);
      const res = await strict.rest('PATCH', `/api/v1/webhooks/${made.body.endpoint.id}`, { apiKey: tenant.apiKey, body: { url: 'https://10.0.0.8/in' } });
      expect({ status: res.status, code: res.body.code }).toEqual({ status: 400, code: 'WEBHOOK_URL_FORBIDDEN_ADDRESS' });
    } finally {
      await strict.close();
    }
  });

  it('switches the scheme through a rotation: a new secret once, the old one signing until the overlap ends', async () => {
    const tenant = await t.tenant();
    const { id } = await created(tenant);
    const before = await stored(id);
    const res = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { signatureScheme: 'standard', overlapSeconds: 600 } });
    expect(res.status).toBe(200);
    const secret = res.body.signingSecret as string;
    expect(standardKeyLength(secret)).toBe(32);
    expect(res.body.endpoint).toMatchObject({ signatureScheme: 'standard', secretRotation: expect.objectContaining({ previousSignatureScheme: 'legacy' }) });
    const row = await stored(id);
    expect(row).toMatchObject({ signature_scheme: 'standard', previous_signature_scheme: 'legacy', previous_secret_key_id: before.secret_key_id });
    expect(row.previous_secret_ciphertext).toEqual(before.secret_ciphertext);
    expect(row.ends_ms! - row.started_ms!).toBe(600_000);

    // Another switch during the overlap is a rotation too, and refused.
    const again = await t.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { signatureScheme: 'both', description: 'x' } });
    expect({ status: again.status, code: again.body.code }).toEqual({ status: 409, code: 'SECRET_ROTATION_IN_PROGRESS' });
    expect(await stored(id)).toEqual(row);
  });
});

it('never writes a secret to the logs, even at debug level', async () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  const logged = await startTestApp({}, { listen: false, logger: createLogger('debug', sink) });
  try {
    const tenant = await logged.tenant();
    const made = await logged.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: good, signatureScheme: 'both' } });
    const id = made.body.endpoint.id as string;
    const rotated = await logged.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 0 } });
    const switched = await logged.rest('PATCH', `/api/v1/webhooks/${id}`, { apiKey: tenant.apiKey, body: { signatureScheme: 'legacy' } });
    const refused = await logged.rest('POST', `/api/v1/webhooks/${id}/rotate-secret`, { apiKey: tenant.apiKey, body: {} });
    expect([made.status, rotated.status, switched.status, refused.status]).toEqual([200, 200, 200, 409]);
    const secrets = [made.body.signingSecret, rotated.body.signingSecret, switched.body.signingSecret] as string[];
    expect(secrets.every((s) => s.startsWith('whsec_'))).toBe(true);
    expect(lines.length).toBeGreaterThan(0);
    const log = lines.join('');
    for (const secret of secrets) expect(log).not.toContain(secret.slice('whsec_'.length));
  } finally {
    await logged.close();
  }
});
