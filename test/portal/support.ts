import { PortalService } from '../../src/gen/publishing/internal/v1/portal_service_pb';
import type { TestApp, Tenant } from '../support/app';
import type { RestAnswer } from '../support/clients';

export const INTERNAL_TOKEN = 'platform-token-0123456789abcdef0123456789';
export const PORTAL_ENV = { INTERNAL_SERVICE_TOKENS: `platform:${INTERNAL_TOKEN}` };

/** A portal session as the browser holds it: its cookie and the CSRF token its page read. */
export interface PortalBrowser {
  sessionId: string;
  cookie: string;
  csrfToken: string;
  /** A REST call with the cookie and, unless told otherwise, the CSRF token. */
  rest(method: string, path: string, options?: { body?: unknown; csrf?: string | null }): Promise<RestAnswer>;
}

/** Mints a session through the internal RPC, as the platform does. */
export async function mint(t: TestApp, tenant: Tenant, capabilities: string[] = [], endpointIds: string[] = [], lifetimeSeconds = 3600) {
  return t.client(PortalService, INTERNAL_TOKEN).createPortalSession({ organizationId: tenant.organizationId, capabilities, endpointIds, lifetimeSeconds });
}

/** Follows the start link as a browser would: the token for the cookie, then the page's session read. */
export async function openPortal(t: TestApp, startPath: string, sessionId: string): Promise<PortalBrowser> {
  const start = await t.fetch(startPath, { redirect: 'manual' });
  if (start.status !== 303) throw new Error(`the start link answered ${start.status}`);
  const setCookie = start.headers.get('set-cookie') ?? '';
  const cookie = setCookie.split(';')[0] ?? '';
  const session = await t.fetch('/portal/session', { headers: { cookie } });
  const { csrfToken } = (await session.json()) as { csrfToken: string };
  return {
    sessionId,
    cookie,
    csrfToken,
    rest: (method, path, options = {}) => {
      const csrf = options.csrf === undefined ? csrfToken : options.csrf;
      return t.rest(method, path, { body: options.body, headers: { cookie, ...(csrf === null ? {} : { 'x-csrf-token': csrf }) } });
    },
  };
}

/** Mints and opens a session in one step. */
export async function portalAs(t: TestApp, tenant: Tenant, capabilities: string[] = [], endpointIds: string[] = []): Promise<PortalBrowser> {
  const minted = await mint(t, tenant, capabilities, endpointIds);
  return openPortal(t, minted.startPath, minted.session!.id);
}
