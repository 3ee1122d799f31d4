import type { Browser, Page } from 'playwright-core';
import { EventService } from '../../src/gen/publishing/internal/v1/event_service_pb';
import { PortalService } from '../../src/gen/publishing/internal/v1/portal_service_pb';
import { OperatorService } from '../../src/gen/publishing/operator/v1/operator_service_pb';
import { ENGINES, startEngineApp, type EngineApp } from '../support/engines';
import { makeTestTls } from '../support/tls';
import { within } from '../support/within';
import { signedWith } from '../support/deliveries';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { INTERNAL_TOKEN, PORTAL_ENV, mint } from './support';
import { axeViolations, cspViolations, launchChromium, localInput, screenshot, serious, type AxeViolation } from './browser-support';

/**
 * The customer portal as a person uses it, in Debian's Chromium against the real service:
 * the platform mints a session, the browser follows the link, and everything after goes
 * through the page and /api/v1 with the session's cookie. On both delivery engines, since
 * sends, attempts and recoveries are deliveries. Each page is checked with axe-core.
 */
let browser: Browser;
let receiver: HttpsReceiver;
let tlsCaPem: string;
/** While set, the receiver answers 503: an outage of the customer's endpoint. */
let down = false;

beforeAll(async () => {
  const tls = await makeTestTls();
  tlsCaPem = tls.caPem;
  receiver = await startHttpsReceiver({
    tls,
    respond: (_index, req) => {
      if (req.url?.startsWith('/html')) return { status: 500, body: '<img src=x onerror="window.__injected=1">' };
      return down ? { status: 503 } : { status: 200 };
    },
  });
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await receiver?.close();
});

/** Every page's accessibility, by page: collected by the embedded run and asserted there. */
const accessibility = new Map<string, AxeViolation[]>();

/** An endpoint's deliveries as stored, with their workflows on Temporal: a failure's message. */
async function deliveriesOf(t: EngineApp, endpointId: string): Promise<string> {
  const rows = await t.orm.em
    .fork()
    .execute<{ id: string; status: string; series: number; attempt_count: number; last_error: string | null; workflow_id: string | null }[]>(
      'select id, status, series, attempt_count, last_error, workflow_id from webhook_deliveries where endpoint_id = ?',
      [endpointId],
    );
  const described = await Promise.all(
    rows.map(async (r) => {
      if (!t.temporal || !r.workflow_id) return null;
      const d = await t.temporal.client.workflow.getHandle(r.workflow_id).describe().catch((e: unknown) => String(e));
      return typeof d === 'string' ? d : { status: d.status.name, historyLength: d.historyLength };
    }),
  );
  return JSON.stringify(rows.map((r, i) => ({ ...r, workflow: described[i] })));
}

async function check(page: Page, name: string, record: boolean): Promise<void> {
  if (!record) return;
  accessibility.set(name, await axeViolations(page));
  await screenshot(page, name);
}

describe.each(ENGINES)('the customer portal on the %s engine', (engine) => {
  let t: EngineApp;
  let page: Page;
  let violations: string[];
  const record = engine === 'embedded';

  beforeAll(async () => {
    t = await startEngineApp(engine, { ...PORTAL_ENV, DELIVERY_EXTRA_CA_PEM: tlsCaPem, DELIVERY_POLL_INTERVAL_MS: '50', DELIVERY_TEST_RETRY_INTERVAL_MS: '100', PORTAL_NAME: 'Acme Social' });
    page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
    page.on('dialog', (dialog) => void dialog.accept());
    violations = cspViolations(page);
  }, 60_000);
  afterAll(async () => {
    await page?.context().close();
    await t?.close();
  });

  it('goes from the minted link through an endpoint, a test, pause, resume, rotation, an outage recovered and the statistics', async () => {
    const tenant = await t.tenant();
    const minted = await mint(t, tenant, ['manage_endpoints', 'secrets', 'resend']);

    // The link works once and leaves no token in the address bar.
    const start = await page.goto(`${t.url}${minted.startPath}`);
    expect(page.url()).toBe(`${t.url}/portal/`);
    expect(start?.headers()['content-security-policy']).toContain("script-src 'self'");
    await page.getByRole('heading', { name: 'Endpoints', level: 1 }).waitFor();
    await page.getByText('No endpoints yet.').waitFor();
    await check(page, 'endpoints-empty', record);

    // Create, with the catalog's picker.
    const url = `${receiver.url}/journey-${engine}`;
    await page.getByLabel('Endpoint URL (https)').fill(url);
    await page.getByLabel('Description').fill('Orders service');
    await page.getByRole('checkbox', { name: /^webhook\.endpoint\.paused/ }).check();
    await page.getByLabel('Signature scheme').selectOption('both');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const secret = (await page.locator('.secret-value').textContent()) ?? '';
    expect(secret).toMatch(/^whsec_/);
    await check(page, 'endpoints', record);
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await page.getByRole('link', { name: url }).click();
    await page.getByRole('heading', { level: 1, name: url }).waitFor();
    const [stored] = await t.orm.em.fork().execute<{ id: string; event_names: string[]; signature_scheme: string }[]>(
      'select id, event_names, signature_scheme from webhook_endpoints where organization_id = ?',
      [tenant.organizationId],
    );
    expect(stored).toMatchObject({ event_names: ['webhook.test', 'webhook.endpoint.paused'], signature_scheme: 'both' });

    // A test delivery arrives signed with the secret the page showed, and its attempt is shown.
    await page.getByRole('button', { name: 'Send test event' }).click();
    await page.getByText('A webhook.test delivery was recorded').waitFor();
    const journey = () => receiver.requests.filter((r) => r.path === `/journey-${engine}`);
    // A start that misses its deadline on a busy machine is left to the pending sweep (10 s, then every 5 s).
    if (!(await within(45_000, async () => journey().length > 0))) throw new Error(`the test delivery did not arrive within 45 s: ${await deliveriesOf(t, stored!.id)}`);
    expect(signedWith(journey()[0]!, secret)).toBe(true);
    expect(
      await within(30_000, async () => {
        await page.getByRole('button', { name: 'Refresh', exact: true }).click();
        return (await page.locator('.badge-delivered').count()) > 0;
      }),
    ).toBe(true);
    await page.getByRole('link', { name: 'webhook.test' }).first().click();
    await page.getByRole('heading', { name: /Delivery of/ }).waitFor();
    await page.getByRole('cell', { name: 'HTTP 200' }).waitFor();
    expect(await page.getByLabel('Payload as sent').textContent()).toContain('"type": "webhook.test"');
    await check(page, 'delivery', record);
    await page.getByRole('link', { name: '← Endpoint' }).click();

    // Pause and resume, as stored.
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByText('Paused: deliveries are held').waitFor();
    const paused = await t.orm.em.fork().execute<{ paused_at: Date | null }[]>('select paused_at from webhook_endpoints where id = ?', [stored!.id]);
    expect(paused[0]!.paused_at).not.toBeNull();
    await page.getByText(/, by your organization\. Deliveries are held until you resume\./).waitFor();
    // The service's own pause, as the failing-endpoint pass writes it: the page says why and since when.
    await t.orm.em.fork().execute(`update webhook_endpoints set pause_reason = 'failing', failing_since = now() - interval '5 days' where id = ?`, [stored!.id]);
    await page.reload();
    await page.getByText(/automatically, on .+: its deliveries kept failing since .+\. Deliveries are held; a test event still goes out/).waitFor();
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByText('Resumed: held deliveries go out now.').waitFor();

    // Rotate: a new secret, the old one signing during the overlap.
    await page.getByLabel('Overlap (hours)').fill('1');
    await page.getByRole('button', { name: 'Rotate secret' }).click();
    const rotated = (await page.locator('.secret-value').textContent()) ?? '';
    expect(rotated).toMatch(/^whsec_/);
    expect(rotated).not.toBe(secret);
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await page.getByText(/signs too until/).waitFor();

    // An outage: a test delivery dead-letters, then the customer recovers it with a dry run first.
    down = true;
    const before = journey().length;
    await page.getByRole('button', { name: 'Send test event' }).click();
    expect(
      await within(20_000, async () => {
        const rows = await t.orm.em.fork().execute<{ n: number }[]>("select count(*)::int as n from webhook_deliveries where endpoint_id = ? and status = 'dead_lettered'", [stored!.id]);
        return rows[0]!.n === 1;
      }),
    ).toBe(true);
    down = false;
    await page.getByLabel('Since').fill(localInput(new Date(Date.now() - 3_600_000)));
    await page.getByRole('button', { name: 'Count deliveries to resend' }).click();
    await page.getByText('1 delivery would be resent.').waitFor();
    // The outage's attempts reached the receiver and were refused.
    expect(journey().length).toBeGreaterThan(before);
    await page.getByRole('button', { name: 'Resend 1 delivery' }).click();
    await page.getByText(/Recovery .*: (queued|running|finished)/).waitFor();
    const recovered = await within(30_000, async () => {
      const rows = await t.orm.em.fork().execute<{ status: string }[]>('select status from webhook_deliveries where endpoint_id = ?', [stored!.id]);
      return rows.length === 2 && rows.every((r) => r.status === 'delivered');
    });
    if (!recovered) throw new Error(`the recovered delivery was not delivered within 30 s: ${await deliveriesOf(t, stored!.id)}`);
    await t.idle();

    // Statistics of the day: two test deliveries, both delivered in the end.
    await page.getByLabel('Period').selectOption('7d');
    await page.getByRole('img', { name: /Deliveries by status: 2 delivered/ }).waitFor();
    await check(page, 'endpoint', record);
    expect(violations).toEqual([]);
  }, 240_000);

  if (engine === 'embedded') {
    it('shows a payload and an answer holding markup as text, never as HTML, neither once erased, and is refused once revoked', async () => {
      const tenant = await t.tenant();
      const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/html`, eventNames: ['note.created'] } });
      const endpointId = created.body.endpoint.id as string;
      const hostile = '<script>window.__injected=2</script><img src=x onerror="window.__injected=3">';
      const published = await t.client(EventService, INTERNAL_TOKEN).publishEvent({
        organizationId: tenant.organizationId,
        eventId: 'note-1',
        eventType: 'note.created',
        payload: { title: hostile },
      });
      const deliveryId = published.event!.deliveries[0]!.deliveryId;
      expect(await within(10_000, async () => receiver.requests.some((r) => r.path === '/html'))).toBe(true);
      const minted = await mint(t, tenant);
      await page.goto(`${t.url}${minted.startPath}`);
      await page.goto(`${t.url}/portal/#/endpoints/${endpointId}/deliveries/${deliveryId}`);
      await page.getByRole('cell', { name: /HTTP 500/ }).first().waitFor();
      expect(await page.getByLabel('Payload as sent').textContent()).toContain(hostile.replaceAll('"', '\\"'));
      expect(await page.locator('.excerpt').first().textContent()).toBe('<img src=x onerror="window.__injected=1">');
      expect(await page.evaluate('window.__injected')).toBeUndefined();
      expect(await page.locator('main img, main script').count()).toBe(0);
      // A read-only session shows no action, and the server refuses one all the same.
      expect(await page.getByRole('button', { name: 'Resend' }).count()).toBe(0);

      // Erased on request (the operator's EraseDeliveryData, once the delivery has finished): the
      // page says so, and neither the payload nor the receiver's answer is shown any more.
      expect(
        await within(30_000, async () => {
          const [row] = await t.orm.em.fork().execute<{ status: string }[]>('select status from webhook_deliveries where id = ?', [deliveryId]);
          return row?.status === 'dead_lettered';
        }),
      ).toBe(true);
      const erased = await t.client(OperatorService, t.config.operatorToken).eraseDeliveryData({ organizationId: tenant.organizationId, eventId: 'note-1', reason: 'customer request' });
      expect(erased.payloadsErased).toBe(1n);
      await page.reload();
      await page.getByText('Payload erased on request').waitFor();
      expect(await page.getByLabel('Payload as sent').count()).toBe(0);
      expect(await page.locator('.excerpt').count()).toBe(0);
      expect(await page.content()).not.toContain('__injected=2');

      await page.goto(`${t.url}/portal/#/catalog`);
      await page.getByRole('heading', { name: 'Event catalog', level: 1 }).waitFor();
      await page.getByRole('heading', { name: 'webhook.test' }).waitFor();
      await check(page, 'catalog', record);

      // The keyboard reaches the navigation and opens a page; the new page takes the focus.
      await page.goto(`${t.url}/portal/#/`);
      await page.reload();
      await page.getByRole('heading', { name: 'Endpoints', level: 1 }).waitFor();
      await page.keyboard.press('Tab');
      expect(await page.evaluate('document.activeElement?.textContent')).toBe('Skip to content');
      await page.keyboard.press('Tab');
      await page.keyboard.press('Tab');
      expect(await page.evaluate('document.activeElement?.textContent')).toBe('Event catalog');
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Event catalog', level: 1 }).waitFor();
      expect(await page.evaluate('document.activeElement?.id')).toBe('main');

      await t.client(PortalService, INTERNAL_TOKEN).revokePortalSessions({ organizationId: tenant.organizationId });
      await page.reload();
      await page.getByText('This access has been revoked.').waitFor();
      expect(violations).toEqual([]);
    }, 60_000);

    it('has no serious or critical accessibility violation on any page', () => {
      expect([...accessibility.keys()].sort()).toEqual(['catalog', 'delivery', 'endpoint', 'endpoints', 'endpoints-empty']);
      for (const [name, found] of accessibility) expect({ page: name, serious: serious(found) }).toEqual({ page: name, serious: [] });
    });
  }
});
