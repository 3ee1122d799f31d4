import {
  type AccountIdentity,
  type ConnectionProvider,
  type IdentityRequest,
  type Link,
  type LinkRequest,
  ProviderError,
  type ProviderFailure,
} from '../provider';

/**
 * The managed-OAuth port on Composio's REST API v3: link sessions for consent, the
 * connected account for status and ownership, and the toolkit's own profile tool for
 * the identity. Shapes and their sources: /tmp/handoff/composio-research.md.
 */
export interface ComposioProviderOptions {
  /** For example https://backend.composio.dev (no /api suffix). */
  baseUrl: string;
  apiKey: string;
  /** Toolkit slug -> auth config id (ac_...). */
  authConfigIds: Record<string, string>;
  /** Per request, headers and body included. Default 10000. */
  timeoutMs?: number;
  /** Toolkit slug -> tool that reads the connected account's own profile, replacing the default. */
  profileTools?: Partial<Record<string, string>>;
  /** Toolkit slug -> toolkit version the profile tool runs at. Default "latest". */
  toolkitVersions?: Partial<Record<string, string>>;
  fetch?: typeof fetch;
}

type Json = Record<string, unknown>;

interface ProfileReader {
  tool: string;
  args: Json;
  read(data: unknown): AccountIdentity | undefined;
}

const PROFILE_READERS: Readonly<Record<string, ProfileReader>> = Object.freeze({
  instagram: {
    tool: 'INSTAGRAM_GET_USER_INFO',
    args: { ig_user_id: 'me' },
    read(data) {
      const user = find(data, (value) => text(value.id) !== undefined);
      const handle = text(user?.username);
      // Instagram Login reports "Business" or "Media_Creator"; the field is often not returned at all.
      const kind = /creator/i.test(text(user?.account_type) ?? '') ? 'creator' : 'business';
      return identity(text(user?.id), kind, text(user?.name) ?? handle, handle, text(user?.profile_picture_url));
    },
  },
  facebook: {
    tool: 'FACEBOOK_LIST_MANAGED_PAGES',
    args: { user_id: 'me', fields: 'id,name,username,picture' },
    read(data) {
      const pages = Array.isArray(data) ? data : find(data, (value) => Array.isArray(value.data))?.data;
      // The port holds one identity per connection; a login granting several Pages yields the first.
      const page = (pages as unknown[] | undefined)?.map(record).find((candidate) => text(candidate?.id));
      const picture = record(record(page?.picture)?.data);
      return identity(text(page?.id), 'page', text(page?.name), text(page?.username), text(picture?.url));
    },
  },
  linkedin: {
    tool: 'LINKEDIN_GET_MY_INFO',
    args: {},
    read(data) {
      // Older toolkit versions wrap OpenID userinfo in response_dict; newer ones return the raw /v2/me profile.
      const me = find(data, (value) => [value.author_id, value.sub, value.id].some((id) => text(id)));
      const id = text(me?.author_id) ?? text(me?.sub) ?? text(me?.id);
      const name =
        text(me?.name) ??
        words(me?.given_name, me?.family_name) ??
        words(me?.localizedFirstName, me?.localizedLastName);
      // OpenID userinfo carries no vanity name, so a member has no handle here.
      return identity(id?.replace(/^urn:li:person:/, ''), 'profile', name, undefined, text(me?.picture));
    },
  },
  youtube: {
    tool: 'YOUTUBE_LIST_CHANNELS',
    args: { part: 'snippet', mine: true },
    read(data) {
      const items = find(data, (value) => Array.isArray(value.items))?.items as unknown[] | undefined;
      const channel = record(items?.[0]);
      const snippet = record(channel?.snippet);
      const thumbnails = record(snippet?.thumbnails);
      const thumbnail = ['default', 'medium', 'high'].map((size) => text(record(thumbnails?.[size])?.url)).find(Boolean);
      return identity(text(channel?.id), 'channel', text(snippet?.title), text(snippet?.customUrl), thumbnail);
    },
  },
});

export class ComposioProvider implements ConnectionProvider {
  readonly name = 'composio';
  readonly #apiKey: string;
  private readonly baseUrl: string;
  private readonly authConfigIds: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly profileTools: Partial<Record<string, string>>;
  private readonly toolkitVersions: Partial<Record<string, string>>;
  private readonly send: typeof fetch;

  constructor(options: ComposioProviderOptions) {
    if (!options.apiKey) throw new Error('ComposioProvider needs an apiKey');
    this.#apiKey = options.apiKey;
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.authConfigIds = options.authConfigIds;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.profileTools = options.profileTools ?? {};
    this.toolkitVersions = options.toolkitVersions ?? {};
    this.send = options.fetch ?? ((input, init) => fetch(input, init));
  }

  async createLink(request: LinkRequest): Promise<Link> {
    const authConfigId = this.authConfigIds[request.toolkit];
    if (!authConfigId) {
      throw new ProviderError('PROVIDER_REJECTED', `no Composio auth config for toolkit "${request.toolkit}"`);
    }
    // Composio keeps the callback URL's own query through consent, so that is how the state comes back.
    const callbackUrl = new URL(request.callbackUrl);
    callbackUrl.searchParams.set('state', request.state);
    const session = await this.call('create link session', 'POST', '/api/v3/connected_accounts/link', {
      auth_config_id: authConfigId,
      user_id: request.userId,
      callback_url: callbackUrl.toString(),
    });
    const redirectUrl = text(session.redirect_url);
    if (!redirectUrl || !URL.canParse(redirectUrl)) {
      throw new ProviderError('PROVIDER_UNAVAILABLE', 'Composio create link session: answer has no usable redirect_url');
    }
    const connectedAccountId = text(session.connected_account_id);
    return connectedAccountId ? { redirectUrl, connectedAccountId } : { redirectUrl };
  }

  async readIdentity(request: IdentityRequest): Promise<AccountIdentity> {
    const reader = PROFILE_READERS[request.toolkit];
    if (!reader) {
      throw new ProviderError('PROVIDER_REJECTED', `no profile reader for toolkit "${request.toolkit}"`);
    }
    const account = await this.call(
      'read connected account',
      'GET',
      `/api/v3/connected_accounts/${encodeURIComponent(request.connectedAccountId)}`,
      undefined,
      'CONNECTED_ACCOUNT_NOT_FOUND',
    );
    const toolkit = text(record(account.toolkit)?.slug);
    const status = text(account.status);
    if (!toolkit || !status) {
      const reason = 'answer lacks toolkit.slug or status';
      throw new ProviderError('PROVIDER_UNAVAILABLE', `Composio read connected account: ${reason}`);
    }
    if (toolkit.toLowerCase() !== request.toolkit.toLowerCase()) {
      const reason = `connected account belongs to toolkit "${toolkit}", not "${request.toolkit}"`;
      throw new ProviderError('CONNECTED_ACCOUNT_MISMATCH', reason);
    }
    // Ownership before status, so the state of someone else's account is never revealed.
    await this.assertOwnedBy(request);
    if (status !== 'ACTIVE' || account.is_disabled === true) {
      const disabled = account.is_disabled === true ? ' and disabled' : '';
      throw new ProviderError('CONNECTED_ACCOUNT_INACTIVE', `connected account is ${status}${disabled}`);
    }
    const tool = this.profileTools[request.toolkit] ?? reader.tool;
    const data = await this.execute(tool, request, reader.args);
    const found = reader.read(data);
    if (!found) {
      throw new ProviderError('PROVIDER_UNAVAILABLE', `Composio tool ${tool} answered without an account id or name`);
    }
    return found;
  }

  /**
   * Composio no longer returns user_id when reading one account (deprecated field);
   * listing with a user filter is the documented way to learn who owns it.
   */
  private async assertOwnedBy(request: IdentityRequest): Promise<void> {
    // List filters are comma-separated, so a comma would turn one owner into several.
    if (request.userId.includes(',') || request.connectedAccountId.includes(',')) {
      throw new ProviderError('CONNECTED_ACCOUNT_MISMATCH', 'user or connected account id cannot be used as a Composio filter');
    }
    const query = new URLSearchParams({
      user_ids: request.userId,
      toolkit_slugs: request.toolkit,
      connected_account_ids: request.connectedAccountId,
      limit: '100',
    });
    const page = await this.call('list connected accounts', 'GET', `/api/v3/connected_accounts?${query}`);
    if (!Array.isArray(page.items)) {
      throw new ProviderError('PROVIDER_UNAVAILABLE', 'Composio list connected accounts: answer has no items');
    }
    if (!page.items.some((item) => record(item)?.id === request.connectedAccountId)) {
      throw new ProviderError('CONNECTED_ACCOUNT_MISMATCH', 'connected account does not belong to this user');
    }
  }

  private async execute(tool: string, request: IdentityRequest, args: Json): Promise<unknown> {
    const result = await this.call(`execute ${tool}`, 'POST', `/api/v3/tools/execute/${encodeURIComponent(tool)}`, {
      connected_account_id: request.connectedAccountId,
      user_id: request.userId,
      arguments: args,
      // Without a version Composio runs the toolkit's base version, which lacks newer tools.
      version: this.toolkitVersions[request.toolkit] ?? 'latest',
    });
    if (result.successful === false || (result.error !== undefined && result.error !== null && result.error !== '')) {
      // Tool errors can quote the upstream request, tokens included, so only the log id travels on.
      const logId = text(result.log_id);
      throw new ProviderError('PROVIDER_UNAVAILABLE', `Composio tool ${tool} failed${logId ? ` (log ${logId})` : ''}`);
    }
    return result.data;
  }

  private async call(
    label: string,
    method: 'GET' | 'POST',
    path: string,
    body?: Json,
    notFound: ProviderFailure = 'PROVIDER_REJECTED',
  ): Promise<Json> {
    let status: number;
    let raw: string;
    try {
      const response = await this.send(`${this.baseUrl}${path}`, {
        method,
        headers: {
          'x-api-key': this.#apiKey,
          accept: 'application/json',
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      status = response.status;
      // Read under the same signal: headers followed by a stalled body is no answer either.
      raw = await response.text();
    } catch (error) {
      // Duck-typed: the DOMException may come from another realm than this module's Error.
      const timedOut = (error as { name?: unknown } | null)?.name === 'TimeoutError';
      const reason = timedOut ? `no answer within ${this.timeoutMs} ms` : 'request failed';
      throw new ProviderError('PROVIDER_UNAVAILABLE', `Composio ${label}: ${reason}`, { cause: error });
    }
    const json = parseObject(raw);
    if (status < 200 || status > 299) throw this.httpFailure(label, status, json, notFound);
    if (!json) throw new ProviderError('PROVIDER_UNAVAILABLE', `Composio ${label}: answer is not a JSON object`);
    return json;
  }

  private httpFailure(label: string, status: number, json: Json | undefined, notFound: ProviderFailure): ProviderError {
    const failure: ProviderFailure =
      status === 404
        ? notFound
        : status >= 400 && status < 500 && status !== 408 && status !== 429
          ? 'PROVIDER_REJECTED'
          : 'PROVIDER_UNAVAILABLE';
    const detail = record(json?.error);
    const code = text(detail?.slug) ?? text(detail?.code);
    const requestId = text(detail?.request_id);
    const said = text(detail?.message) ?? text(json?.message);
    const message =
      `Composio ${label} answered ${status}` +
      (code ? ` ${code}` : '') +
      (requestId ? ` (request ${requestId})` : '') +
      (said ? `: ${said.slice(0, 300)}` : '');
    // Composio's own messages can quote the key it was given.
    return new ProviderError(failure, message.split(this.#apiKey).join('[redacted]'));
  }
}

function identity(
  accountId: string | undefined,
  kind: string,
  displayName: string | undefined,
  handle: string | undefined,
  avatarUrl: string | undefined,
): AccountIdentity | undefined {
  if (!accountId || !displayName) return undefined;
  return { accountId, kind, displayName, handle: handle ?? '', avatarUrl: avatarUrl ?? '' };
}

/** Tool payloads arrive bare or wrapped in data / response_data / response_dict, depending on the toolkit version. */
function find(value: unknown, accept: (candidate: Json) => boolean, depth = 0): Json | undefined {
  const candidate = record(value);
  if (!candidate) return undefined;
  if (accept(candidate)) return candidate;
  if (depth >= 3) return undefined;
  for (const key of ['data', 'response_data', 'response_dict']) {
    const hit = find(candidate[key], accept, depth + 1);
    if (hit) return hit;
  }
  return undefined;
}

function record(value: unknown): Json | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value.trim() === '' ? undefined : value;
  return typeof value === 'number' && Number.isFinite(value) ? String(value) : undefined;
}

function words(...parts: unknown[]): string | undefined {
  return text(parts.map(text).filter(Boolean).join(' '));
}

function parseObject(raw: string): Json | undefined {
  try {
    return record(JSON.parse(raw));
  } catch {
    return undefined;
  }
}
