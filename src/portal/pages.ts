import { readFileSync, existsSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { ConnectError } from '@connectrpc/connect';
import type { Logger, PortalConfig } from '../config';
import type { MikroORM } from '../db';
import { errorInfoOf, httpStatusOf, type ErrorCode } from '../errors';
import { COOKIE_NAME, cookieSecretOf, csrfTokenOf, type PortalSessions } from './sessions';
import { START_PATH } from './service';

/** The portal's build (`portal/`, built by scripts/build-portal.ts), served under /portal/. */
export const PORTAL_DIST = path.resolve(__dirname, '../../portal/dist');
export const PORTAL_PATH = '/portal';
const SESSION_PATH = '/portal/session';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
};

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

export interface PortalPagesOptions {
  orm: MikroORM;
  sessions: PortalSessions;
  config: PortalConfig;
  /** The service's public base URL: an https one means the cookie is Secure behind a TLS proxy. */
  publicUrl: () => string;
  logger: Logger;
  dist?: string;
}

/**
 * The portal's own routes: the token's exchange for the cookie, the page's session read
 * (its CSRF token, capabilities and theme), and the built page's files, each with a strict
 * Content-Security-Policy (no inline script or style; only this origin) and the configured
 * frame-ancestors. The page talks to the service through /api/v1 like any client.
 */
export class PortalPages {
  private readonly files = new Map<string, Buffer>();
  private readonly csp: string;
  private readonly dist: string;

  constructor(private readonly options: PortalPagesOptions) {
    this.dist = options.dist ?? PORTAL_DIST;
    const logo = options.config.theme.logoUrl;
    const logoSource = logo.startsWith('https://') ? ` ${new URL(logo).origin}` : '';
    this.csp = [
      "default-src 'none'",
      "script-src 'self'",
      "style-src 'self'",
      `img-src 'self' data:${logoSource}`,
      "connect-src 'self'",
      "base-uri 'none'",
      "form-action 'self'",
      `frame-ancestors 'self'${options.config.frameAncestors.map((o) => ` ${o}`).join('')}`,
    ].join('; ');
  }

  /** Whether the path is the portal's. */
  static owns(urlPath: string): boolean {
    return urlPath === PORTAL_PATH || urlPath.startsWith(`${PORTAL_PATH}/`);
  }

  handle(req: Request, res: Response): void {
    const url = new URL(req.url ?? '/', 'http://portal.invalid');
    this.secure(res);
    if (req.method !== 'GET' && req.method !== 'HEAD') return this.refuse(res, 'METHOD_NOT_ALLOWED', `${req.method ?? ''} is not allowed here.`);
    if (url.pathname === START_PATH) return void this.start(req, res, url).catch((error: unknown) => this.failed(res, error));
    if (url.pathname === SESSION_PATH) return void this.session(req, res).catch((error: unknown) => this.failed(res, error));
    this.file(res, url.pathname);
  }

  private secure(res: Response): void {
    res.setHeader('content-security-policy', this.csp);
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'no-referrer');
  }

  /**
   * Exchanges the one-time token for the session cookie and sends the browser on to the page
   * without it, so the token lingers in no URL, history entry or Referer. The URL is never
   * logged (it holds the token).
   */
  private async start(req: Request, res: Response, url: URL): Promise<void> {
    res.setHeader('cache-control', 'no-store');
    try {
      const { cookieSecret, expiresAt } = await this.options.sessions.exchange(this.options.orm.em.fork(), url.searchParams.get('token') ?? '');
      const maxAge = Math.max(0, Math.floor((expiresAt.getTime() - Date.now()) / 1000));
      const secure = isTls(req) || this.options.publicUrl().startsWith('https://');
      const attributes = [`Path=/`, `Max-Age=${maxAge}`, 'HttpOnly', `SameSite=${this.options.config.cookieSameSite}`, ...(secure ? ['Secure'] : [])];
      res.setHeader('set-cookie', `${COOKIE_NAME}=${cookieSecret}; ${attributes.join('; ')}`);
      redirect(res, `${PORTAL_PATH}/`);
    } catch (error) {
      const code = error instanceof ConnectError ? errorInfoOf(error)?.code : undefined;
      if (!code) throw error;
      redirect(res, `${PORTAL_PATH}/?refused=${code}`);
    }
  }

  /** What the page needs to call the API as its session: never readable from another origin (no CORS). */
  private async session(req: Request, res: Response): Promise<void> {
    res.setHeader('cache-control', 'no-store');
    const cookie = headerOf(req, 'cookie');
    try {
      const principal = await this.options.sessions.session(this.options.orm.em.fork(), cookie);
      json(res, 200, {
        csrfToken: csrfTokenOf(cookieSecretOf(cookie) ?? ''),
        organizationId: principal.organizationId,
        sessionId: principal.sessionId,
        capabilities: principal.capabilities,
        endpointIds: principal.endpointIds ?? [],
        theme: this.options.config.theme,
      });
    } catch (error) {
      const info = error instanceof ConnectError ? errorInfoOf(error) : null;
      if (!info) throw error;
      this.refuse(res, info.code, error instanceof ConnectError ? error.rawMessage : '');
    }
  }

  private file(res: Response, urlPath: string): void {
    const relative = urlPath === PORTAL_PATH || urlPath === `${PORTAL_PATH}/` ? 'index.html' : urlPath.slice(PORTAL_PATH.length + 1);
    const extension = path.extname(relative);
    const type = TYPES[extension];
    if (!type || relative.split('/').some((part) => part === '..' || part.startsWith('.') || part === '')) {
      return this.refuse(res, 'ROUTE_NOT_FOUND', 'No such page.');
    }
    const body = this.read(relative);
    if (!body) {
      return relative === 'index.html'
        ? this.refuse(res, 'UNAVAILABLE', 'The portal is not built: run scripts/build-portal.sh.')
        : this.refuse(res, 'ROUTE_NOT_FOUND', 'No such page.');
    }
    // Built files under assets/ carry their content's hash in their name.
    res.setHeader('cache-control', relative.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache');
    write(res, 200, type, body);
  }

  private read(relative: string): Buffer | null {
    const cached = this.files.get(relative);
    if (cached) return cached;
    const file = path.join(this.dist, relative);
    if (!file.startsWith(this.dist + path.sep) || !existsSync(file)) return null;
    const body = readFileSync(file);
    this.files.set(relative, body);
    return body;
  }

  private refuse(res: Response, code: ErrorCode, message: string): void {
    const requestId = randomUUID();
    res.setHeader('x-error-code', code);
    json(res, httpStatusOf(code), { code, message, requestId });
  }

  private failed(res: Response, error: unknown): void {
    const requestId = randomUUID();
    this.options.logger.error({ err: error, requestId }, 'portal route failed');
    json(res, 500, { code: 'INTERNAL', message: `Internal error; quote request id ${requestId} when reporting it.`, requestId });
  }
}

function isTls(req: Request): boolean {
  return Boolean((req.socket as { encrypted?: boolean } | undefined)?.encrypted);
}

function headerOf(req: Request, name: string): string | null {
  const value = req.headers[name];
  return typeof value === 'string' ? value : null;
}

function redirect(res: Response, location: string): void {
  res.setHeader('location', location);
  write(res, 303, 'text/plain; charset=utf-8', Buffer.from(''));
}

function json(res: Response, status: number, body: unknown): void {
  write(res, status, 'application/json', Buffer.from(JSON.stringify(body)));
}

function write(res: Response, status: number, type: string, body: Buffer): void {
  const plain = res as ServerResponse;
  plain.writeHead(status, { 'content-type': type, 'content-length': body.length });
  plain.end(plain.req?.method === 'HEAD' ? undefined : body);
}
