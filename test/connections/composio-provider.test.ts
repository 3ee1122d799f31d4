import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { ProviderError, type ProviderFailure } from '../../src/connections/provider';
import { ComposioProvider, type ComposioProviderOptions } from '../../src/connections/providers/composio';

const API_KEY = 'ak_test_5b1e0c9d7f2a';
const USER = 'usr_01J9Z3ALICE';
/** The attempt's state; Composio binds accounts to the user, so the adapter does not read it. */
const STATE = 'v1.attempt-state';
const OTHER_USER = 'usr_01J9Z3MALLORY';

interface Recorded {
  method: string;
  path: string;
  query: URLSearchParams;
  apiKey: string | undefined;
  body: unknown;
}

interface Account {
  id: string;
  userId: string;
  toolkit: string;
  status: string;
  isDisabled?: boolean;
}

type Misbehaviour = (request: Recorded, res: ServerResponse) => void;

/** Speaks the documented Composio v3 shapes; see /tmp/handoff/composio-research.md. */
class FakeComposio {
  readonly requests: Recorded[] = [];
  readonly accounts = new Map<string, Account>();
  readonly toolData = new Map<string, unknown>();
  /** Whole execute answers, for tool-level failures that still come back as HTTP 200. */
  readonly toolEnvelopes = new Map<string, unknown>();
  misbehave: Misbehaviour | undefined;
  private server: Server | undefined;
  baseUrl = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.baseUrl = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    // Hanging-response tests leave sockets open on purpose.
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  reset(): void {
    this.requests.length = 0;
    this.accounts.clear();
    this.toolData.clear();
    this.toolEnvelopes.clear();
    this.misbehave = undefined;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const url = new URL(req.url ?? '/', 'http://composio.test');
    const raw = Buffer.concat(chunks).toString('utf8');
    const request: Recorded = {
      method: req.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      apiKey: req.headers['x-api-key'] as string | undefined,
      body: raw ? JSON.parse(raw) : undefined,
    };
    this.requests.push(request);

    if (request.apiKey !== API_KEY) {
      // The real API quotes what it was given; the adapter must not pass that on.
      return send(res, 401, composioError(401, `Invalid API key: ${request.apiKey}`, 'INVALID_API_KEY'));
    }
    if (this.misbehave) return this.misbehave(request, res);

    const accountPath = /^\/api\/v3\/connected_accounts\/([^/]+)$/.exec(request.path);
    const toolPath = /^\/api\/v3\/tools\/execute\/([^/]+)$/.exec(request.path);
    if (request.method === 'POST' && request.path === '/api/v3/connected_accounts/link') return this.link(request, res);
    if (request.method === 'GET' && request.path === '/api/v3/connected_accounts') return this.list(request, res);
    if (request.method === 'GET' && accountPath && accountPath[1] !== 'link') return this.account(accountPath[1]!, res);
    if (request.method === 'POST' && toolPath) return this.execute(toolPath[1]!, request, res);
    send(res, 404, composioError(404, 'Route not found', 'NOT_FOUND'));
  }

  private link(request: Recorded, res: ServerResponse): void {
    const body = request.body as { auth_config_id?: string; user_id?: string };
    if (!body.auth_config_id || !body.user_id) {
      return send(res, 400, composioError(400, 'auth_config_id and user_id are required', 'VALIDATION_ERROR'));
    }
    send(res, 201, {
      link_token: 'lt_9f8e7d',
      redirect_url: 'https://connect.composio.dev/link/lk_9f8e7d',
      expires_at: '2030-01-01T00:10:00.000Z',
      connected_account_id: 'ca_pending_01',
      account_type: 'PRIVATE',
    });
  }

  private list(request: Recorded, res: ServerResponse): void {
    const filter = (name: string) => request.query.get(name)?.split(',');
    const users = filter('user_ids');
    const toolkits = filter('toolkit_slugs');
    const ids = filter('connected_account_ids');
    const items = [...this.accounts.values()]
      .filter((a) => (!users || users.includes(a.userId)) && (!toolkits || toolkits.includes(a.toolkit)))
      .filter((a) => !ids || ids.includes(a.id))
      .map(accountBody);
    send(res, 200, { items, next_cursor: null, total_pages: 1, current_page: 1, total_items: items.length });
  }

  private account(id: string, res: ServerResponse): void {
    const account = this.accounts.get(decodeURIComponent(id));
    if (!account) return send(res, 404, composioError(404, 'Connected account not found', 'CONNECTED_ACCOUNT_NOT_FOUND'));
    send(res, 200, accountBody(account));
  }

  private execute(slug: string, request: Recorded, res: ServerResponse): void {
    const body = request.body as { connected_account_id?: string; user_id?: string };
    const account = this.accounts.get(body.connected_account_id ?? '');
    if (!account || account.userId !== body.user_id) {
      return send(res, 400, composioError(400, 'No connected account found for this user and toolkit', 'ACCOUNT_NOT_FOUND'));
    }
    if (this.toolEnvelopes.has(slug)) return send(res, 200, this.toolEnvelopes.get(slug));
    if (!this.toolData.has(slug)) return send(res, 404, composioError(404, `Tool ${slug} not found`, 'TOOL_NOT_FOUND'));
    send(res, 200, { data: this.toolData.get(slug), error: null, successful: true, log_id: 'log_Xy12' });
  }
}

function accountBody(account: Account): Record<string, unknown> {
  // user_id is deprecated on these answers and left out, as the current API does.
  return {
    id: account.id,
    toolkit: { slug: account.toolkit },
    auth_config: { id: `ac_${account.toolkit}`, auth_scheme: 'OAUTH2', is_composio_managed: true, is_disabled: false },
    status: account.status,
    status_reason: null,
    is_disabled: account.isDisabled ?? false,
    state: { authScheme: 'OAUTH2', val: { status: account.status, access_token: 'upstream-access-token' } },
    created_at: '2030-01-01T00:00:00.000Z',
    updated_at: '2030-01-01T00:00:00.000Z',
    test_request_endpoint: null,
  };
}

function composioError(status: number, message: string, slug: string) {
  return { error: { message, code: status * 10, slug, status, request_id: 'req_abc123', suggested_fix: null } };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const TOOL_DATA = {
  INSTAGRAM_GET_USER_INFO: {
    data: {
      id: '17841400000000001',
      username: 'maple.bakery',
      name: 'Maple Bakery',
      profile_picture_url: 'https://cdn.example/ig.jpg',
      followers_count: 1200,
    },
  },
  FACEBOOK_LIST_MANAGED_PAGES: {
    data: [
      {
        id: '104000000000001',
        name: 'Maple Bakery',
        username: 'maplebakery',
        category: 'Bakery',
        picture: { data: { url: 'https://cdn.example/fb.jpg' } },
        access_token: 'page-access-token',
      },
    ],
    paging: { cursors: { before: 'b', after: 'a' } },
  },
  LINKEDIN_GET_MY_INFO: {
    response_dict: {
      author_id: 'urn:li:person:AbC123xyz',
      sub: 'AbC123xyz',
      name: 'Ada Baker',
      given_name: 'Ada',
      family_name: 'Baker',
      picture: 'https://cdn.example/li.jpg',
      email: 'ada@example.com',
    },
  },
  YOUTUBE_LIST_CHANNELS: {
    kind: 'youtube#channelListResponse',
    items: [
      {
        kind: 'youtube#channel',
        id: 'UC1234567890abcdefghij',
        snippet: {
          title: 'Maple Bakery TV',
          customUrl: '@maplebakerytv',
          thumbnails: { default: { url: 'https://cdn.example/yt.jpg' } },
        },
      },
    ],
  },
} as const;

const fake = new FakeComposio();

beforeAll(() => fake.start());
afterAll(() => fake.stop());
beforeEach(() => fake.reset());

function provider(overrides: Partial<ComposioProviderOptions> = {}): ComposioProvider {
  return new ComposioProvider({
    baseUrl: fake.baseUrl,
    apiKey: API_KEY,
    authConfigIds: { instagram: 'ac_ig', facebook: 'ac_fb', linkedin: 'ac_li', youtube: 'ac_yt' },
    timeoutMs: 2_000,
    ...overrides,
  });
}

function addAccount(account: Partial<Account> & { id: string; toolkit: string }): void {
  fake.accounts.set(account.id, { userId: USER, status: 'ACTIVE', ...account });
}

/** Every failure also proves the key stays out of the message. */
async function failureOf(promise: Promise<unknown>, apiKey = API_KEY): Promise<ProviderFailure> {
  const error = await promise.then(
    () => {
      throw new Error('expected the provider to fail');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  expect((error as ProviderError).message).not.toContain(apiKey);
  return (error as ProviderError).failure;
}

describe('ComposioProvider.createLink', () => {
  it('opens a link session for the toolkit auth config and returns its consent page', async () => {
    const link = await provider().createLink({
      toolkit: 'instagram',
      userId: USER,
      callbackUrl: 'https://app.example/connections/callback?org=org_7',
      state: 'st.signed.value',
    });

    expect(link).toEqual({
      redirectUrl: 'https://connect.composio.dev/link/lk_9f8e7d',
      connectedAccountId: 'ca_pending_01',
    });
    expect(fake.requests).toHaveLength(1);
    const [request] = fake.requests;
    expect(request).toMatchObject({ method: 'POST', path: '/api/v3/connected_accounts/link', apiKey: API_KEY });
    expect(request!.body).toEqual({
      auth_config_id: 'ac_ig',
      user_id: USER,
      callback_url: 'https://app.example/connections/callback?org=org_7&state=st.signed.value',
    });
  });

  it('carries the state back on the callback URL, encoded', async () => {
    await provider().createLink({
      toolkit: 'youtube',
      userId: USER,
      callbackUrl: 'https://app.example/cb',
      state: 'a+b/c=d&e',
    });

    const callback = new URL((fake.requests[0]!.body as { callback_url: string }).callback_url);
    expect(callback.searchParams.get('state')).toBe('a+b/c=d&e');
  });

  it('refuses a toolkit that has no auth config, without calling Composio', async () => {
    const attempt = provider().createLink({ toolkit: 'tiktok', userId: USER, callbackUrl: 'https://app.example/cb', state: 's' });

    await expect(failureOf(attempt)).resolves.toBe('PROVIDER_REJECTED');
    expect(fake.requests).toHaveLength(0);
  });

  it('treats a session without a redirect URL as an unusable answer', async () => {
    fake.misbehave = (_request, res) => send(res, 201, { link_token: 'lt_1', connected_account_id: 'ca_1' });

    const attempt = provider().createLink({ toolkit: 'instagram', userId: USER, callbackUrl: 'https://app.example/cb', state: 's' });

    await expect(failureOf(attempt)).resolves.toBe('PROVIDER_UNAVAILABLE');
  });
});

describe('ComposioProvider.readIdentity', () => {
  it.each([
    [
      'instagram',
      'INSTAGRAM_GET_USER_INFO',
      { ig_user_id: 'me' },
      {
        accountId: '17841400000000001',
        kind: 'business',
        displayName: 'Maple Bakery',
        handle: 'maple.bakery',
        avatarUrl: 'https://cdn.example/ig.jpg',
      },
    ],
    [
      'facebook',
      'FACEBOOK_LIST_MANAGED_PAGES',
      { user_id: 'me', fields: 'id,name,username,picture' },
      {
        accountId: '104000000000001',
        kind: 'page',
        displayName: 'Maple Bakery',
        handle: 'maplebakery',
        avatarUrl: 'https://cdn.example/fb.jpg',
      },
    ],
    [
      'linkedin',
      'LINKEDIN_GET_MY_INFO',
      {},
      { accountId: 'AbC123xyz', kind: 'profile', displayName: 'Ada Baker', handle: '', avatarUrl: 'https://cdn.example/li.jpg' },
    ],
    [
      'youtube',
      'YOUTUBE_LIST_CHANNELS',
      { part: 'snippet', mine: true },
      {
        accountId: 'UC1234567890abcdefghij',
        kind: 'channel',
        displayName: 'Maple Bakery TV',
        handle: '@maplebakerytv',
        avatarUrl: 'https://cdn.example/yt.jpg',
      },
    ],
  ])('reads the %s identity through %s', async (toolkit, tool, args, expected) => {
    addAccount({ id: `ca_${toolkit}`, toolkit });
    fake.toolData.set(tool, TOOL_DATA[tool as keyof typeof TOOL_DATA]);

    const found = await provider().readIdentity({ toolkit, userId: USER, connectedAccountId: `ca_${toolkit}`, state: STATE });

    expect(found).toEqual(expected);
    const execute = fake.requests.find((r) => r.path === `/api/v3/tools/execute/${tool}`);
    expect(execute).toMatchObject({ method: 'POST', apiKey: API_KEY });
    expect(execute!.body).toEqual({
      connected_account_id: `ca_${toolkit}`,
      user_id: USER,
      arguments: args,
      version: 'latest',
    });
  });

  it('checks ownership by listing the user’s accounts, not by a field Composio no longer returns', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram' });
    fake.toolData.set('INSTAGRAM_GET_USER_INFO', TOOL_DATA.INSTAGRAM_GET_USER_INFO);

    await provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'GET /api/v3/connected_accounts/ca_ig',
      'GET /api/v3/connected_accounts',
      'POST /api/v3/tools/execute/INSTAGRAM_GET_USER_INFO',
    ]);
    const list = fake.requests[1]!.query;
    expect(list.get('user_ids')).toBe(USER);
    expect(list.get('toolkit_slugs')).toBe('instagram');
    expect(list.get('connected_account_ids')).toBe('ca_ig');
  });

  it('reports a creator account as a creator', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram' });
    fake.toolData.set('INSTAGRAM_GET_USER_INFO', {
      data: { ...TOOL_DATA.INSTAGRAM_GET_USER_INFO.data, account_type: 'MEDIA_CREATOR' },
    });

    const found = await provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    expect(found.kind).toBe('creator');
  });

  it('runs the configured profile tool at the configured toolkit version', async () => {
    addAccount({ id: 'ca_yt', toolkit: 'youtube' });
    fake.toolData.set('YOUTUBE_GET_CHANNEL_STATISTICS', { data: TOOL_DATA.YOUTUBE_LIST_CHANNELS });

    const found = await provider({
      profileTools: { youtube: 'YOUTUBE_GET_CHANNEL_STATISTICS' },
      toolkitVersions: { youtube: '20260429_00' },
    }).readIdentity({ toolkit: 'youtube', userId: USER, connectedAccountId: 'ca_yt', state: STATE });

    expect(found.accountId).toBe('UC1234567890abcdefghij');
    const execute = fake.requests.find((r) => r.path === '/api/v3/tools/execute/YOUTUBE_GET_CHANNEL_STATISTICS');
    expect((execute!.body as { version: string }).version).toBe('20260429_00');
  });

  it.each(['INITIATED', 'EXPIRED', 'FAILED', 'INACTIVE'])('refuses an account that is %s', async (status) => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram', status });

    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_INACTIVE');
    expect(fake.requests.some((r) => r.path.startsWith('/api/v3/tools/execute/'))).toBe(false);
  });

  it('refuses an account that has not finished consent', async () => {
    addAccount({ id: 'ca_pending_01', toolkit: 'linkedin', status: 'INITIATED' });

    const attempt = provider().readIdentity({ toolkit: 'linkedin', userId: USER, connectedAccountId: 'ca_pending_01', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_INACTIVE');
  });

  it('refuses an active account that was disabled', async () => {
    addAccount({ id: 'ca_fb', toolkit: 'facebook', isDisabled: true });

    const attempt = provider().readIdentity({ toolkit: 'facebook', userId: USER, connectedAccountId: 'ca_fb', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_INACTIVE');
  });

  it('refuses an account that belongs to another user', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram', userId: OTHER_USER });
    fake.toolData.set('INSTAGRAM_GET_USER_INFO', TOOL_DATA.INSTAGRAM_GET_USER_INFO);

    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_MISMATCH');
    expect(fake.requests.some((r) => r.path.startsWith('/api/v3/tools/execute/'))).toBe(false);
  });

  it('does not reveal the status of another user’s account', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram', userId: OTHER_USER, status: 'EXPIRED' });

    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_MISMATCH');
  });

  it('refuses an account connected for another toolkit', async () => {
    addAccount({ id: 'ca_fb', toolkit: 'facebook' });

    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_fb', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_MISMATCH');
  });

  it('refuses a user id that would widen the ownership filter', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram', userId: OTHER_USER });

    const attempt = provider().readIdentity({
      toolkit: 'instagram',
      userId: `${USER},${OTHER_USER}`,
      connectedAccountId: 'ca_ig',
      state: STATE,
    });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_MISMATCH');
  });

  it('reports an unknown connected account as not found', async () => {
    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_missing', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('CONNECTED_ACCOUNT_NOT_FOUND');
  });

  it('refuses a toolkit it has no profile reader for, without calling Composio', async () => {
    const attempt = provider().readIdentity({ toolkit: 'tiktok', userId: USER, connectedAccountId: 'ca_tt', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('PROVIDER_REJECTED');
    expect(fake.requests).toHaveLength(0);
  });

  it('treats a failed profile tool as unavailable and keeps the upstream error text out', async () => {
    addAccount({ id: 'ca_ig', toolkit: 'instagram' });
    fake.toolEnvelopes.set('INSTAGRAM_GET_USER_INFO', {
      data: {},
      error: 'Graph API error: access_token=EAAG-upstream-secret has expired',
      successful: false,
      log_id: 'log_fail_1',
    });

    const error = (await provider()
      .readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE })
      .catch((e: unknown) => e)) as ProviderError;

    expect(error).toBeInstanceOf(ProviderError);
    expect(error.failure).toBe('PROVIDER_UNAVAILABLE');
    expect(error.message).toContain('log_fail_1');
    expect(error.message).not.toContain('EAAG-upstream-secret');
  });

  it('treats a profile answer without an account id as unavailable', async () => {
    addAccount({ id: 'ca_li', toolkit: 'linkedin' });
    fake.toolData.set('LINKEDIN_GET_MY_INFO', { response_dict: { name: 'Ada Baker' } });

    const attempt = provider().readIdentity({ toolkit: 'linkedin', userId: USER, connectedAccountId: 'ca_li', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('PROVIDER_UNAVAILABLE');
  });

  it('treats an account answer without a status as unavailable', async () => {
    fake.misbehave = (_request, res) => send(res, 200, { id: 'ca_ig', toolkit: { slug: 'instagram' } });

    const attempt = provider().readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

    await expect(failureOf(attempt)).resolves.toBe('PROVIDER_UNAVAILABLE');
  });
});

describe('ComposioProvider when Composio fails', () => {
  const readInstagram = (options: Partial<ComposioProviderOptions> = {}) =>
    provider(options).readIdentity({ toolkit: 'instagram', userId: USER, connectedAccountId: 'ca_ig', state: STATE });

  it('reports a refused API key as rejected without repeating the key', async () => {
    const wrongKey = 'ak_live_wrong_0000';

    const error = await readInstagram({ apiKey: wrongKey }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).failure).toBe('PROVIDER_REJECTED');
    expect((error as ProviderError).message).toContain('401');
    expect((error as ProviderError).message).not.toContain(wrongKey);
    expect(fake.requests[0]!.apiKey).toBe(wrongKey);
  });

  it.each([
    [400, 'PROVIDER_REJECTED'],
    [403, 'PROVIDER_REJECTED'],
    [422, 'PROVIDER_REJECTED'],
    [429, 'PROVIDER_UNAVAILABLE'],
    [500, 'PROVIDER_UNAVAILABLE'],
    [503, 'PROVIDER_UNAVAILABLE'],
  ])('maps HTTP %i to %s', async (status, failure) => {
    fake.misbehave = (_request, res) => send(res, status, composioError(status, 'nope', 'SOME_ERROR'));

    await expect(failureOf(readInstagram())).resolves.toBe(failure);
  });

  it('never repeats the API key that Composio echoes in an error body', async () => {
    fake.misbehave = (_request, res) => send(res, 500, composioError(500, `upstream failed for key ${API_KEY}`, 'INTERNAL'));

    const error = (await readInstagram().catch((e: unknown) => e)) as ProviderError;

    expect(error.failure).toBe('PROVIDER_UNAVAILABLE');
    expect(error.message).toContain('[redacted]');
    expect(error.message).toContain('req_abc123');
    expect(error.message).not.toContain(API_KEY);
  });

  it('treats a malformed JSON answer as unavailable', async () => {
    fake.misbehave = (_request, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id": "ca_ig", "status": ');
    };

    await expect(failureOf(readInstagram())).resolves.toBe('PROVIDER_UNAVAILABLE');
  });

  it('treats an HTML error page as unavailable', async () => {
    fake.misbehave = (_request, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html><body>Bad gateway</body></html>');
    };

    await expect(failureOf(readInstagram())).resolves.toBe('PROVIDER_UNAVAILABLE');
  });

  it('gives up on a response that never comes', async () => {
    fake.misbehave = () => undefined;
    const started = Date.now();

    const error = (await readInstagram({ timeoutMs: 150 }).catch((e: unknown) => e)) as ProviderError;

    expect(error).toBeInstanceOf(ProviderError);
    expect(error.failure).toBe('PROVIDER_UNAVAILABLE');
    expect(error.message).toContain('150 ms');
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  it('gives up on a body that stalls after the headers', async () => {
    fake.misbehave = (_request, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id": "ca_ig", ');
    };

    await expect(failureOf(readInstagram({ timeoutMs: 150 }))).resolves.toBe('PROVIDER_UNAVAILABLE');
  });

  it('treats a refused connection as unavailable', async () => {
    const closed = createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));

    await expect(failureOf(readInstagram({ baseUrl: `http://127.0.0.1:${port}` }))).resolves.toBe('PROVIDER_UNAVAILABLE');
  });

  it('keeps the API key out of the provider’s own printable fields', () => {
    const instance = provider();

    expect(JSON.stringify(instance)).not.toContain(API_KEY);
    expect(inspect(instance, { depth: 5 })).not.toContain(API_KEY);
  });
});
