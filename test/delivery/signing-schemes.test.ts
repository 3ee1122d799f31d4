/**
 * What receivers get, scheme by scheme, before, during and after a rotation: real
 * deliveries to a real HTTPS receiver, verified as customers verify them. `legacy` with the
 * README's verifyWebhook and an independent HMAC as "Delivery format" describes it;
 * `standard` and `both` with the reference Standard Webhooks library (`standardwebhooks`).
 * The overlap is short and its end is waited for on the list's signal (the rotation is no
 * longer shown), so the same tables run on every engine.
 */
import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import type { Tenant } from '../support/app';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from '../support/https-receiver';
import { within } from '../support/within';
import { verifyWebhook, WebhookVerificationError } from '../../src/signatures';

/** Long enough for one delivery per endpoint to be signed inside it on a busy machine. */
const OVERLAP_SECONDS = 8;

const SEED_HEADERS = ['x-service-signature', 'x-service-timestamp'];
const STANDARD_HEADERS = ['webhook-id', 'webhook-signature', 'webhook-timestamp'];

/** The signature headers a delivery carries, sorted. */
function signatureHeaders(request: ReceivedRequest): string[] {
  return Object.keys(request.headers)
    .filter((name) => name.startsWith('x-service-') || name.startsWith('webhook-'))
    .sort();
}

/** "Delivery format", as a receiver that reads only the README computes it: hex HMAC of "<ts>.<body>", keyed with the whole secret. */
function seedSignature(secret: string, request: ReceivedRequest): string {
  return createHmac('sha256', secret).update(`${request.headers['x-service-timestamp']}.${request.rawBody}`).digest('hex');
}

function verifiesLegacy(secret: string, request: ReceivedRequest): boolean {
  try {
    verifyWebhook(secret, request.headers, Buffer.from(request.rawBody, 'utf8'));
    return true;
  } catch (error) {
    expect(error).toBeInstanceOf(WebhookVerificationError);
    return false;
  }
}

/** The reference library, as a receiver calls it: the raw body and the headers it was sent. */
function verifiesStandard(secret: string, request: ReceivedRequest): boolean {
  try {
    new Webhook(secret).verify(request.rawBody, request.headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}

describe.each(ENGINES)('signature schemes on the %s engine', (engine) => {
  let t: EngineApp;
  let receiver: HttpsReceiver;
  let tenant: Tenant;

  beforeAll(async () => {
    const tls = await makeTestTls();
    // The first attempt to /retry fails, so one delivery shows two attempts.
    let retried = false;
    receiver = await startHttpsReceiver({
      tls,
      respond: (_index, req) => {
        if (req.url === '/retry' && !retried) {
          retried = true;
          return { status: 500 };
        }
        return { status: 200 };
      },
    });
    t = await startEngineApp(engine, { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '300' });
    tenant = await t.tenant();
  });
  afterAll(async () => {
    await receiver?.close();
    await t?.close();
  });

  async function create(path: string, signatureScheme?: string): Promise<{ id: string; secret: string }> {
    const res = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/${path}`, ...(signatureScheme && { signatureScheme }) } });
    expect(res.status).toBe(200);
    return { id: res.body.endpoint.id, secret: res.body.signingSecret };
  }

  /** Sends a webhook.test delivery and answers the request(s) the receiver got for it, once `attempts` arrived. */
  async function deliver(endpointId: string, attempts = 1): Promise<{ deliveryId: string; requests: ReceivedRequest[] }> {
    const res = await t.rest('POST', `/api/v1/webhooks/${endpointId}/test`, { apiKey: tenant.apiKey });
    expect(res.status).toBe(200);
    const { id: deliveryId, eventId } = res.body.delivery;
    const arrived = () => receiver.requests.filter((r) => (JSON.parse(r.rawBody) as { id: string }).id === eventId);
    expect(await within(15_000, async () => arrived().length >= attempts)).toBe(true);
    return { deliveryId, requests: arrived() };
  }

  async function deliverOnce(endpointId: string): Promise<ReceivedRequest> {
    const { requests } = await deliver(endpointId);
    expect(requests).toHaveLength(1);
    return requests[0]!;
  }

  it('legacy, the default: exactly the seed headers, verified as README "Delivery format" says', async () => {
    const { id, secret } = await create('legacy-plain');
    const request = await deliverOnce(id);
    expect(signatureHeaders(request)).toEqual(SEED_HEADERS);
    expect(request.headers['x-service-signature']).toBe(seedSignature(secret, request));
    expect(verifiesLegacy(secret, request)).toBe(true);
  });

  it('standard: only the Standard Webhooks headers, with a webhook-id stable across the attempts of a delivery', async () => {
    const { id, secret } = await create('retry', 'standard');
    const { deliveryId, requests } = await deliver(id, 2);
    expect(requests.map((r) => r.answered)).toEqual([500, 200]);
    for (const request of requests) {
      expect(signatureHeaders(request)).toEqual(STANDARD_HEADERS);
      expect(request.headers['webhook-id']).toBe(deliveryId);
      expect(request.headers['webhook-id']).not.toContain('.');
      expect(request.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
      expect(Number(request.headers['webhook-timestamp'])).toBeCloseTo(request.receivedAt / 1000, -1);
      expect(verifiesStandard(secret, request)).toBe(true);
    }
    expect(requests[1]!.rawBody).toBe(requests[0]!.rawBody);
    expect(JSON.parse(requests[0]!.rawBody)).toMatchObject({ type: 'webhook.test', data: { endpointId: id } });
  });

  it('both: the seed headers and the Standard Webhooks headers on one delivery, each verifying', async () => {
    const { id, secret } = await create('both-plain', 'both');
    const request = await deliverOnce(id);
    expect(signatureHeaders(request)).toEqual([...SEED_HEADERS, ...STANDARD_HEADERS].sort());
    expect(request.headers['x-service-timestamp']).toBe(request.headers['webhook-timestamp']);
    expect(request.headers['x-service-signature']).toBe(seedSignature(secret, request));
    expect(verifiesLegacy(secret, request)).toBe(true);
    expect(verifiesStandard(secret, request)).toBe(true);
  });

  it('across a rotation: the old secret verifies until the overlap ends and the new one from its start, for every scheme and a scheme switch', async () => {
    const endpoints = {
      legacy: await create('legacy', 'legacy'),
      standard: await create('standard', 'standard'),
      both: await create('both', 'both'),
      switched: await create('switched'),
    };
    type Name = keyof typeof endpoints;
    const names = Object.keys(endpoints) as Name[];

    const before = await Promise.all(names.map((name) => deliverOnce(endpoints[name].id)));
    expect(verifiesLegacy(endpoints.legacy.secret, before[0]!)).toBe(true);
    expect(verifiesStandard(endpoints.standard.secret, before[1]!)).toBe(true);
    expect(verifiesStandard(endpoints.both.secret, before[2]!)).toBe(true);
    expect(verifiesLegacy(endpoints.switched.secret, before[3]!)).toBe(true);

    const next: Record<Name, string> = { legacy: '', standard: '', both: '', switched: '' };
    let endsAt = 0;
    for (const name of names) {
      const res =
        name === 'switched'
          ? await t.rest('PATCH', `/api/v1/webhooks/${endpoints[name].id}`, { apiKey: tenant.apiKey, body: { signatureScheme: 'standard', overlapSeconds: OVERLAP_SECONDS } })
          : await t.rest('POST', `/api/v1/webhooks/${endpoints[name].id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: OVERLAP_SECONDS } });
      expect(res.status).toBe(200);
      next[name] = res.body.signingSecret;
      endsAt = Math.max(endsAt, Date.parse(res.body.endpoint.secretRotation.endsAt));
    }

    const during = await Promise.all(names.map((name) => deliverOnce(endpoints[name].id)));
    // Signed inside the overlap, or this test says nothing about it.
    for (const request of during) expect(Number(request.headers['x-service-timestamp'] ?? request.headers['webhook-timestamp']) * 1000).toBeLessThan(endsAt);
    const [legacy, standard, both, switched] = during as [ReceivedRequest, ReceivedRequest, ReceivedRequest, ReceivedRequest];

    // legacy: the receiver that changed nothing reads x-service-signature with its old secret; the switched one also finds x-service-signature-next.
    expect(signatureHeaders(legacy)).toEqual([...SEED_HEADERS, 'x-service-signature-next'].sort());
    expect(legacy.headers['x-service-signature']).toBe(seedSignature(endpoints.legacy.secret, legacy));
    expect(verifiesLegacy(endpoints.legacy.secret, legacy)).toBe(true);
    expect(verifiesLegacy(next.legacy, legacy)).toBe(true);

    // standard: webhook-signature lists both, so the library verifies either secret.
    expect(signatureHeaders(standard)).toEqual(STANDARD_HEADERS);
    expect((standard.headers['webhook-signature'] as string).split(' ')).toHaveLength(2);
    expect(verifiesStandard(endpoints.standard.secret, standard)).toBe(true);
    expect(verifiesStandard(next.standard, standard)).toBe(true);

    // both: each set of headers verifies with either secret.
    expect(signatureHeaders(both)).toEqual([...SEED_HEADERS, 'x-service-signature-next', ...STANDARD_HEADERS].sort());
    expect(both.headers['x-service-signature']).toBe(seedSignature(endpoints.both.secret, both));
    for (const secret of [endpoints.both.secret, next.both]) {
      expect(verifiesLegacy(secret, both)).toBe(true);
      expect(verifiesStandard(secret, both)).toBe(true);
    }

    // legacy → standard: the legacy receiver keeps its headers; the new secret signs the standard ones.
    expect(signatureHeaders(switched)).toEqual([...SEED_HEADERS, ...STANDARD_HEADERS].sort());
    expect(switched.headers['x-service-signature']).toBe(seedSignature(endpoints.switched.secret, switched));
    expect(verifiesStandard(next.switched, switched)).toBe(true);

    // The end needs nothing run: the list stops showing the rotation once its time has passed.
    const list = async () => (await t.rest('GET', '/api/v1/webhooks', { apiKey: tenant.apiKey })).body.endpoints as { id: string; secretRotation?: unknown }[];
    expect((await list()).filter((e) => e.secretRotation).map((e) => e.id).sort()).toEqual(names.map((n) => endpoints[n].id).sort());
    expect(await within(OVERLAP_SECONDS * 1000 + 5_000, async () => (await list()).every((e) => !e.secretRotation))).toBe(true);

    const after = await Promise.all(names.map((name) => deliverOnce(endpoints[name].id)));
    // Headers carry whole seconds: an attempt signed at endsAt + 0.2 s says endsAt's second.
    for (const request of after) expect(Number(request.headers['x-service-timestamp'] ?? request.headers['webhook-timestamp'])).toBeGreaterThanOrEqual(Math.floor(endsAt / 1000));
    const [legacyAfter, standardAfter, bothAfter, switchedAfter] = after as [ReceivedRequest, ReceivedRequest, ReceivedRequest, ReceivedRequest];

    expect(signatureHeaders(legacyAfter)).toEqual(SEED_HEADERS);
    expect(legacyAfter.headers['x-service-signature']).toBe(seedSignature(next.legacy, legacyAfter));
    expect(verifiesLegacy(next.legacy, legacyAfter)).toBe(true);
    expect(verifiesLegacy(endpoints.legacy.secret, legacyAfter)).toBe(false);

    expect(signatureHeaders(standardAfter)).toEqual(STANDARD_HEADERS);
    expect((standardAfter.headers['webhook-signature'] as string).split(' ')).toHaveLength(1);
    expect(verifiesStandard(next.standard, standardAfter)).toBe(true);
    expect(verifiesStandard(endpoints.standard.secret, standardAfter)).toBe(false);

    expect(signatureHeaders(bothAfter)).toEqual([...SEED_HEADERS, ...STANDARD_HEADERS].sort());
    expect(verifiesLegacy(next.both, bothAfter)).toBe(true);
    expect(verifiesStandard(next.both, bothAfter)).toBe(true);
    expect(verifiesLegacy(endpoints.both.secret, bothAfter)).toBe(false);
    expect(verifiesStandard(endpoints.both.secret, bothAfter)).toBe(false);

    expect(signatureHeaders(switchedAfter)).toEqual(STANDARD_HEADERS);
    expect(verifiesStandard(next.switched, switchedAfter)).toBe(true);
  }, 60_000);
});
