import { createHmac, randomBytes } from 'node:crypto';
import { main } from '../../src/admin/cli';
import { loadConfig } from '../../src/config';
import { startTestApp, type TestApp } from '../support/app';
import { rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver } from '../support/https-receiver';


/** `npm run admin -- rotate-secrets --json` with these variables; the answer parsed. */
async function rotateSecrets(env: Record<string, string>): Promise<unknown> {
  let stdout = '';
  let stderr = '';
  const status = await main(['rotate-secrets', '--json'], {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: { ...process.env, NODE_ENV: 'test', ...env },
  });
  expect({ status, stderr }).toEqual({ status: 0, stderr: '' });
  return JSON.parse(stdout);
}
const OLD = `k1:${randomBytes(32).toString('base64')}`;
const NEW = `k2:${randomBytes(32).toString('base64')}`;

describe('rotating the key that encrypts signing secrets', () => {
  let before: TestApp | undefined;
  let after: TestApp | undefined;
  afterAll(async () => {
    await after?.close();
  });

  it('re-encrypts every secret under the new key while both keys are listed, and deliveries keep their signature', async () => {
    const tls = await makeTestTls();
    const env = { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50' };
    before = await startTestApp({ ...env, SECRET_ENCRYPTION_KEYS: OLD });
    const receiver = await startHttpsReceiver({ tls });
    const tenant = await before.tenant();
    const created = await Promise.all(
      [1, 2, 3].map(() => rest(before!.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/in` } })),
    );
    // The second endpoint is in the overlap of a signing-secret rotation: its previous secret is sealed under k1 too.
    const inOverlap = created[1]!.body;
    const rotatedSecret = await rest(before.url, 'POST', `/api/v1/webhooks/${inOverlap.endpoint.id}/rotate-secret`, { apiKey: tenant.apiKey, body: { overlapSeconds: 3600 } });
    expect(rotatedSecret.status).toBe(200);
    const databaseUrl = before.databaseUrl;
    const stored = await before.orm.em.fork().execute<{ secret_key_id: string }[]>('select secret_key_id from webhook_endpoints');
    expect(stored.map((r) => r.secret_key_id)).toEqual(['k1', 'k1', 'k1']);
    const previousKeyOf = async (app: TestApp) =>
      (await app.orm.em.fork().execute<{ k: string }[]>('select previous_secret_key_id as k from webhook_endpoints where id = ?', [inOverlap.endpoint.id]))[0]!.k;
    expect(await previousKeyOf(before)).toBe('k1');
    // The database stays; only the app goes, so the next one can run with the rotated keys.
    await before.app.close();
    before.app.close = async () => undefined;

    expect(await rotateSecrets({ DATABASE_URL: databaseUrl, SECRET_ENCRYPTION_KEYS: `${NEW},${OLD}` })).toEqual({ currentKeyId: 'k2', rotated: 3 });

    after = await startTestApp({ ...env, SECRET_ENCRYPTION_KEYS: NEW }, { databaseUrl });
    const rotated = await after.orm.em.fork().execute<{ secret_key_id: string }[]>('select secret_key_id from webhook_endpoints');
    expect(rotated.map((r) => r.secret_key_id)).toEqual(['k2', 'k2', 'k2']);
    expect(await previousKeyOf(after)).toBe('k2');

    // Only the new key is configured now, and the old secret still signs the delivery.
    const first = created[0]!.body;
    const test = await rest(after.url, 'POST', `/api/v1/webhooks/${first.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(test.status).toBe(200);
    const [request] = await receiver.waitForRequests(1, 5000);
    const ts = request!.headers['x-service-timestamp'] as string;
    expect(request!.headers['x-service-signature']).toBe(createHmac('sha256', first.signingSecret).update(`${ts}.${request!.rawBody}`).digest('hex'));

    // Both secrets of the endpoint in its overlap open under the new key and sign its delivery.
    const overlapping = await rest(after.url, 'POST', `/api/v1/webhooks/${inOverlap.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(overlapping.status).toBe(200);
    const [, second] = await receiver.waitForRequests(2, 5000);
    const ts2 = second!.headers['x-service-timestamp'] as string;
    expect(second!.headers['x-service-signature']).toBe(createHmac('sha256', inOverlap.signingSecret).update(`${ts2}.${second!.rawBody}`).digest('hex'));
    expect(second!.headers['x-service-signature-next']).toBe(createHmac('sha256', rotatedSecret.body.signingSecret).update(`${ts2}.${second!.rawBody}`).digest('hex'));

    expect(await rotateSecrets({ DATABASE_URL: databaseUrl, SECRET_ENCRYPTION_KEYS: NEW })).toEqual({ currentKeyId: 'k2', rotated: 0 });
    await receiver.close();
    await after.close();
    await before.close();
    after = undefined;
  });

  it('moves secrets off the development key when the first SECRET_ENCRYPTION_KEYS lists only the new key', async () => {
    const tls = await makeTestTls();
    const env = { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_POLL_INTERVAL_MS: '50' };
    // No SECRET_ENCRYPTION_KEYS: the development default.
    const dev = await startTestApp(env);
    const receiver = await startHttpsReceiver({ tls });
    let rotatedApp: TestApp | undefined;
    try {
      const tenant = await dev.tenant();
      const created = await rest(dev.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/in` } });
      expect(created.status).toBe(200);
      const databaseUrl = dev.databaseUrl;
      expect(await dev.orm.em.fork().execute('select secret_key_id from webhook_endpoints')).toEqual([{ secret_key_id: 'dev' }]);
      await dev.app.close();
      dev.app.close = async () => undefined;

      // The README's recipe: the new key alone, then rotate-secrets.
      expect(await rotateSecrets({ DATABASE_URL: databaseUrl, SECRET_ENCRYPTION_KEYS: NEW })).toEqual({ currentKeyId: 'k2', rotated: 1 });

      rotatedApp = await startTestApp({ ...env, SECRET_ENCRYPTION_KEYS: NEW }, { databaseUrl });
      expect(await rotatedApp.orm.em.fork().execute('select secret_key_id from webhook_endpoints')).toEqual([{ secret_key_id: 'k2' }]);
      const test = await rest(rotatedApp.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
      expect(test.status).toBe(200);
      const [request] = await receiver.waitForRequests(1, 5000);
      const ts = request!.headers['x-service-timestamp'] as string;
      expect(request!.headers['x-service-signature']).toBe(
        createHmac('sha256', created.body.signingSecret).update(`${ts}.${request!.rawBody}`).digest('hex'),
      );
    } finally {
      await receiver.close();
      await rotatedApp?.close();
      await dev.close();
    }
  });

  it('never knows the development key in production', () => {
    const config = loadConfig({
      NODE_ENV: 'production',
      DATABASE_URL: 'postgres://service@db.example/app',
      STATE_SIGNING_KEY: randomBytes(32).toString('hex'),
      OPERATOR_TOKEN: randomBytes(32).toString('hex'),
      SECRET_ENCRYPTION_KEYS: NEW,
      COMPOSIO_API_KEY: 'composio-key',
      COMPOSIO_AUTH_CONFIG_IDS: 'instagram=ac_1',
      INTERNAL_SERVICE_TOKENS: `scheduler:${randomBytes(32).toString('hex')}`,
    });
    expect([...config.secretKeys.keys()]).toEqual(['k2']);
    expect(config.currentSecretKeyId).toBe('k2');
  });
});
