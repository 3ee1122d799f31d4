import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { CHROMIUM_ARGS, CHROMIUM_PATH } from '../../scripts/chromium';
const ROOT = path.join(__dirname, '..', '..');
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

export async function launchChromium(): Promise<Browser> {
  // jest's global setup provisions it (scripts/chromium.ts); a missing one fails here, never skips.
  if (!existsSync(CHROMIUM_PATH)) throw new Error(`${CHROMIUM_PATH} is missing: run scripts/with-node.sh tsx scripts/chromium.ts`);
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS, headless: true });
}

/** Messages the page logged that say the Content-Security-Policy refused something: there must be none. */
export function cspViolations(page: Page): string[] {
  const violations: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) violations.push(message.text());
  });
  return violations;
}

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: number;
}

/**
 * The page's accessibility violations as axe-core finds them (WCAG 2.1 A and AA rules and
 * best practices). Loaded through the DevTools protocol, which the page's CSP does not govern.
 */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(AXE);
  // Written as page source: the suites compile without the DOM's types.
  return page.evaluate(`axe
    .run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } })
    .then((result) => result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length })))`);
}

/** Serious and critical violations: what the suite refuses. */
export function serious(violations: AxeViolation[]): AxeViolation[] {
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/**
 * A screenshot of a page: into docs/images/ (committed, shown in the README) when
 * UPDATE_SCREENSHOTS=1, else into test-artifacts/ for a look after a failure.
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  const folder = process.env.UPDATE_SCREENSHOTS === '1' ? path.join(ROOT, 'docs', 'images') : path.join(ROOT, 'test-artifacts', 'portal');
  mkdirSync(folder, { recursive: true });
  await page.screenshot({ path: path.join(folder, `portal-${name}.png`), fullPage: true });
}

/** The value a datetime-local input takes for an instant, in the browser's (this machine's) zone. */
export function localInput(at: Date): string {
  return new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}
