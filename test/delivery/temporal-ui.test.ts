import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { startEngineApp, type EngineApp } from '../support/engines';
import { rest } from '../support/clients';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver';
import { untilStored } from '../support/deliveries';
import { testTemporalUiUrl } from '../support/temporal';
import { CHROMIUM_ARGS, CHROMIUM_PATH } from '../../scripts/chromium';

/**
 * The operator's view: the Temporal UI of the run's development server, in Debian's Chromium
 * (a real browser; none is downloaded), finds a delivery's workflow by its EventId search
 * attribute and shows its id, status and attempts. The screenshot is kept under
 * test-artifacts/ (README "Operating deliveries" shows one).
 */
const ARTIFACTS = path.join(__dirname, '..', '..', 'test-artifacts');

let t: EngineApp;
let receiver: HttpsReceiver;
let browser: Browser;

beforeAll(async () => {
  const tls = await makeTestTls();
  // "/ui" fails once, then answers 200; "/down" always fails; "/ok" always answers 200.
  let uiRequests = 0;
  receiver = await startHttpsReceiver({
    tls,
    respond: (_i, req) => {
      if (req.url?.startsWith('/down')) return { status: 500 };
      if (req.url?.startsWith('/ok')) return { status: 200 };
      return uiRequests++ < 1 ? { status: 502 } : { status: 200 };
    },
  });
  t = await startEngineApp('temporal', { DELIVERY_EXTRA_CA_PEM: tls.caPem, DELIVERY_TEST_RETRY_INTERVAL_MS: '1000' });
  browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS, headless: true });
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await t?.close();
  await receiver?.close();
});

it('finds a delivery by its EventId search attribute and shows its workflow id, status and attempts', async () => {
  const tenant = await t.tenant();
  const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/ui`, eventNames: ['webhook.test'] } });
  const sent = await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
  const { id, workflowId } = sent.body.delivery as { id: string; workflowId: string };
  await untilStored(t.orm, id, (row) => row.status === 'delivered', 30_000);
  await t.idle();
  const eventId = (await t.temporal!.client.workflow.getHandle(workflowId).describe()).memo!.eventId as string;

  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  try {
    const ui = testTemporalUiUrl();
    await page.goto(`${ui}/namespaces/default/workflows?query=${encodeURIComponent(`EventId="${eventId}"`)}`);
    const link = page.getByRole('link', { name: workflowId });
    await link.waitFor({ timeout: 30_000 });
    // One row: the search attribute finds exactly this delivery's workflow.
    expect(await link.count()).toBe(1);
    await link.click();
    await page.waitForURL(/\/workflows\/.+\/.+/, { timeout: 30_000 });
    await page.getByText('Completed').first().waitFor({ timeout: 30_000 });
    const text = await page.locator('body').innerText();
    expect(text).toContain(workflowId);
    expect(text).toContain('deliverWebhook');
    // The workflow's result, as the UI shows it: the delivery and the attempt that delivered it.
    await page.getByText('"attempts"').first().waitFor({ timeout: 30_000 });
    const result = await page.locator('body').innerText();
    expect(result).toMatch(/"status":\s*"delivered"/);
    expect(result).toMatch(/"attempts":\s*2/);
    await mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'temporal-ui-delivery.png'), fullPage: true });
  } finally {
    await page.close();
  }
}, 120_000);

it('lists the dead letters by their DeliveryOutcome, and not the deliveries that arrived', async () => {
  const tenant = await t.tenant();
  const sent: Record<string, { id: string; workflowId: string }> = {};
  for (const route of ['down', 'ok']) {
    const created = await rest(t.url, 'POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: `${receiver.url}/${route}`, eventNames: ['webhook.test'] } });
    sent[route] = (await rest(t.url, 'POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey })).body.delivery;
  }
  await untilStored(t.orm, sent.down!.id, (row) => row.status === 'dead_lettered', 60_000);
  await untilStored(t.orm, sent.ok!.id, (row) => row.status === 'delivered', 30_000);
  await t.idle();

  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  try {
    const query = `OrganizationId="${tenant.organizationId}" AND DeliveryOutcome="dead_lettered"`;
    await page.goto(`${testTemporalUiUrl()}/namespaces/default/workflows?query=${encodeURIComponent(query)}`);
    const deadLetter = page.getByRole('link', { name: sent.down!.workflowId });
    await deadLetter.waitFor({ timeout: 30_000 });
    expect(await page.getByRole('link', { name: sent.ok!.workflowId }).count()).toBe(0);
    await page.goto(`${testTemporalUiUrl()}/namespaces/default/workflows?query=${encodeURIComponent(`OrganizationId="${tenant.organizationId}" AND DeliveryOutcome="delivered" AND DeliveryAttempts=1`)}`);
    await page.getByRole('link', { name: sent.ok!.workflowId }).waitFor({ timeout: 30_000 });
    expect(await page.getByRole('link', { name: sent.down!.workflowId }).count()).toBe(0);
  } finally {
    await page.close();
  }
}, 120_000);
