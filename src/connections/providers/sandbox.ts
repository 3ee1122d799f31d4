import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ProviderError, type AccountIdentity, type ConnectionProvider, type IdentityRequest, type Link, type LinkRequest } from '../provider';

/**
 * A managed-OAuth provider built into the service for development and tests. Its
 * consent page lists sample accounts per toolkit; approving redirects to the callback
 * with the state and a connected-account reference, like the real provider does.
 * `?account=<key>` on the approve URL picks an account without a browser.
 *
 * The reference names the account approved and is bound to the attempt whose consent
 * approved it (`sbx.<toolkit>.<key>.<approval>`, the approval an HMAC over the state):
 * completing an attempt with an account its consent never returned is refused, as the
 * real provider refuses an account that belongs to someone else.
 */
export const SANDBOX_ACCOUNTS: Record<string, (AccountIdentity & { key: string })[]> = {
  instagram: [
    { key: 'bakery', accountId: '17841400000000001', kind: 'business', displayName: 'Sandbox Bakery', handle: 'sandboxbakery', avatarUrl: 'https://example.com/avatars/bakery.png' },
    { key: 'creator', accountId: '17841400000000002', kind: 'creator', displayName: 'Sandy Creator', handle: 'sandycreates', avatarUrl: 'https://example.com/avatars/creator.png' },
  ],
  facebook: [
    { key: 'page', accountId: '104000000000001', kind: 'page', displayName: 'Sandbox Bakery Page', handle: 'sandboxbakerypage', avatarUrl: 'https://example.com/avatars/page.png' },
    { key: 'page2', accountId: '104000000000002', kind: 'page', displayName: 'Sandbox Cafe Page', handle: 'sandboxcafe', avatarUrl: 'https://example.com/avatars/cafe.png' },
  ],
  linkedin: [
    { key: 'member', accountId: 'urn:li:person:SandboxA1', kind: 'profile', displayName: 'Sam Sandbox', handle: 'sam-sandbox', avatarUrl: 'https://example.com/avatars/sam.png' },
    { key: 'member2', accountId: 'urn:li:person:SandboxB2', kind: 'profile', displayName: 'Sue Sandbox', handle: 'sue-sandbox', avatarUrl: 'https://example.com/avatars/sue.png' },
  ],
  youtube: [
    { key: 'channel', accountId: 'UCsandbox000000000000001', kind: 'channel', displayName: 'Sandbox Kitchen', handle: '@sandboxkitchen', avatarUrl: 'https://example.com/avatars/kitchen.png' },
    { key: 'channel2', accountId: 'UCsandbox000000000000002', kind: 'channel', displayName: 'Sandbox Garden', handle: '@sandboxgarden', avatarUrl: 'https://example.com/avatars/garden.png' },
  ],
};

const REF_PREFIX = 'sbx';
export const SANDBOX_PATH = '/sandbox/consent';

/** 128 bits of HMAC-SHA256, base64url. */
const APPROVAL_LENGTH = 22;

export class SandboxProvider implements ConnectionProvider {
  readonly name = 'sandbox';

  /**
   * `publicUrl` is read on use: with port 0 it is known only once the listener is bound.
   * `approvalKey` signs approvals; every instance given the same key accepts the others'.
   */
  constructor(
    private readonly publicUrlOf: () => string,
    private readonly approvalKey: Buffer,
  ) {}

  private get publicUrl(): string {
    return this.publicUrlOf();
  }

  async createLink(request: LinkRequest): Promise<Link> {
    const url = new URL(SANDBOX_PATH, this.publicUrl);
    url.searchParams.set('toolkit', request.toolkit);
    url.searchParams.set('state', request.state);
    url.searchParams.set('callback', request.callbackUrl);
    return { redirectUrl: url.toString() };
  }

  async readIdentity(request: IdentityRequest): Promise<AccountIdentity> {
    const [prefix, toolkit, key, approval, ...rest] = request.connectedAccountId.split('.');
    const account = SANDBOX_ACCOUNTS[toolkit ?? '']?.find((a) => a.key === key);
    if (prefix !== REF_PREFIX || rest.length > 0 || !account) {
      throw new ProviderError('CONNECTED_ACCOUNT_NOT_FOUND', 'The sandbox knows no such connected account.');
    }
    if (toolkit !== request.toolkit) {
      throw new ProviderError('CONNECTED_ACCOUNT_MISMATCH', 'The connected account belongs to another toolkit.');
    }
    const expected = Buffer.from(this.approvalOf(request.state, toolkit, account.key));
    const presented = Buffer.from(approval ?? '');
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
      throw new ProviderError('CONNECTED_ACCOUNT_MISMATCH', "The connected account was not approved in this attempt's consent.");
    }
    const { key: _key, ...identity } = account;
    return identity;
  }

  private refOf(state: string, toolkit: string, key: string): string {
    return `${REF_PREFIX}.${toolkit}.${key}.${this.approvalOf(state, toolkit, key)}`;
  }

  private approvalOf(state: string, toolkit: string, key: string): string {
    return createHmac('sha256', this.approvalKey)
      .update(`sandbox approval\n${state}\n${toolkit}\n${key}`)
      .digest('base64url')
      .slice(0, APPROVAL_LENGTH);
  }

  /** Serves the consent page and its approve step; returns false for other paths. */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    const url = new URL(req.url ?? '/', this.publicUrl);
    if (url.pathname !== SANDBOX_PATH && url.pathname !== `${SANDBOX_PATH}/approve`) return false;
    const toolkit = url.searchParams.get('toolkit') ?? '';
    const state = url.searchParams.get('state') ?? '';
    const callback = url.searchParams.get('callback') ?? '';
    const accounts = SANDBOX_ACCOUNTS[toolkit];
    // Only our own callback: the consent page must not redirect a browser anywhere it is told.
    if (!accounts || !state || !callback.startsWith(`${this.publicUrl}/`)) {
      res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' });
      res.end('The sandbox consent link is incomplete: toolkit, state and callback are required.');
      return true;
    }
    if (url.pathname.endsWith('/approve')) {
      const account = accounts.find((a) => a.key === url.searchParams.get('account'));
      if (!account) {
        res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('Choose one of the listed accounts.');
        return true;
      }
      const target = new URL(callback);
      target.searchParams.set('state', state);
      target.searchParams.set('connected_account_id', this.refOf(state, toolkit, account.key));
      res.writeHead(302, { location: target.toString() });
      res.end();
      return true;
    }
    const approve = (key: string) => {
      const link = new URL(`${SANDBOX_PATH}/approve`, this.publicUrl);
      link.search = url.search;
      link.searchParams.set('account', key);
      return link.pathname + link.search;
    };
    const items = accounts
      .map((a) => `<li><a href="${escapeHtml(approve(a.key))}">Approve ${escapeHtml(a.displayName)} (${escapeHtml(a.kind)}, ${escapeHtml(a.handle)})</a></li>`)
      .join('');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': "default-src 'none'" });
    res.end(`<!doctype html><title>Sandbox consent</title><h1>Connect ${escapeHtml(toolkit)}</h1><p>Choose the account to connect:</p><ul>${items}</ul>`);
    return true;
  }
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
