/**
 * The only way the service sends HTTP to customer-controlled URLs (DESIGN decision 7):
 * https only, TLS verified, the SSRF filter applied to the addresses actually dialled,
 * no redirects, one deadline for the whole attempt, a capped response body.
 */
import type { LookupAddress, LookupOptions } from 'node:dns';
import { promises as dnsPromises } from 'node:dns';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { createAddressPolicy, FORBIDDEN_REASON_TEXT, type AddressPolicy, type ForbiddenReason } from './address-policy';

export type OutboundErrorKind = 'invalid_url' | 'blocked_address' | 'dns' | 'timeout' | 'tls' | 'connection';

/**
 * A failed attempt. `message` is safe to store as a delivery's last error and to show
 * the customer: it never contains headers, the body, the URL path or query, or the
 * resolved address. `code` is the Node/OpenSSL error code when there was one, or the
 * policy reason (`loopback`, `private`, ...) for blocked_address; fine for logs and metrics.
 */
export class OutboundError extends Error {
  override readonly name = 'OutboundError';
  constructor(
    readonly kind: OutboundErrorKind,
    message: string,
    readonly code?: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface OutboundResponse {
  status: number;
  body: Buffer;
  /** True when the endpoint sent more than maxResponseBytes; the rest was not read. */
  truncated: boolean;
}

export interface OutboundClient {
  post(url: string, headers: Record<string, string>, body: string): Promise<OutboundResponse>;
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: 4 | 6 }[]>;

export interface OutboundOptions {
  /** CIDRs exempt from the SSRF filter (tests: 127.0.0.0/8, ::1/128). Empty in production. */
  allowCidrs?: string[];
  /** PEM CA trusted in addition to the default roots (never instead of them). */
  extraCa?: string;
  /** Deadline for the whole attempt: DNS, connect, TLS, request and reading the response. */
  timeoutMs: number;
  /** Response bytes kept; the connection is dropped once more arrive. */
  maxResponseBytes: number;
  /** Replaces DNS resolution (tests); every address returned is still checked. */
  lookup?: Resolver;
}

const defaultResolver: Resolver = async (hostname) => {
  const found = await dnsPromises.lookup(hostname, { all: true, order: 'verbatim' });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

export function createOutboundClient(options: OutboundOptions): OutboundClient {
  const policy = createAddressPolicy(options.allowCidrs ?? []);
  const sendOptions: SendOptions = {
    timeoutMs: options.timeoutMs,
    maxResponseBytes: options.maxResponseBytes,
    // Only with an extra CA (tests), at the cost of parsing the roots on each connection.
    // Production trusts Node's default store, plus NODE_EXTRA_CA_CERTS, loaded once.
    ca: options.extraCa ? [...tls.getCACertificates('default'), options.extraCa] : undefined,
    lookup: guardedLookup(options.lookup ?? defaultResolver, policy),
  };

  return {
    async post(url, headers, body) {
      return send(parseTarget(url, policy), headers, body, sendOptions);
    },
  };
}

interface Target {
  host: string;
  port: number;
  path: string;
}

function parseTarget(raw: string, policy: AddressPolicy): Target {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OutboundError('invalid_url', 'The endpoint URL is not a valid URL.');
  }
  if (url.protocol !== 'https:') throw new OutboundError('invalid_url', 'The endpoint URL must use https.');
  if (url.username || url.password) {
    throw new OutboundError('invalid_url', 'The endpoint URL must not contain credentials.');
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (!host) throw new OutboundError('invalid_url', 'The endpoint URL has no host.');

  // Node never calls `lookup` for an IP literal, so the filter has to run here instead.
  if (net.isIP(host)) {
    const verdict = policy(host);
    if (!verdict.allowed) throw blocked(verdict.reason);
  }
  return { host, port: url.port ? Number(url.port) : 443, path: `${url.pathname}${url.search}` };
}

function blocked(reason: ForbiddenReason): OutboundError {
  return new OutboundError('blocked_address', `The endpoint resolves to ${FORBIDDEN_REASON_TEXT[reason]}, which is not allowed.`, reason);
}

/**
 * A `lookup` for the socket: it runs on every connection, after DNS, immediately
 * before dialling, so a name that rebinds to a private address between registration
 * and delivery (or between two attempts) is still refused.
 */
function guardedLookup(resolve: Resolver, policy: AddressPolicy): net.LookupFunction {
  return (hostname: string, opts: LookupOptions, callback) => {
    checkedAddresses(hostname, opts.family, resolve, policy).then(
      (addresses) => {
        const first = addresses[0]!;
        if (opts.all) callback(null, addresses);
        else callback(null, first.address, first.family);
      },
      (err: OutboundError) => callback(err, ''),
    );
  };
}

async function checkedAddresses(
  hostname: string,
  family: LookupOptions['family'],
  resolve: Resolver,
  policy: AddressPolicy,
): Promise<LookupAddress[]> {
  let found: { address: string; family: 4 | 6 }[];
  try {
    found = await resolve(hostname);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    throw new OutboundError('dns', `DNS lookup for ${hostname} failed${code ? ` (${code})` : ''}.`, code, { cause: err });
  }
  // One forbidden answer refuses the whole name: a mixed answer is a rebinding signal.
  for (const { address } of found) {
    const verdict = policy(address);
    if (!verdict.allowed) throw blocked(verdict.reason);
  }
  const wanted = family === 4 || family === 6 ? found.filter((a) => a.family === family) : found;
  if (wanted.length === 0) throw new OutboundError('dns', `DNS lookup for ${hostname} returned no addresses.`, 'ENOTFOUND');
  return wanted;
}

interface SendOptions {
  timeoutMs: number;
  maxResponseBytes: number;
  ca: string[] | undefined;
  lookup: net.LookupFunction;
}

function send(target: Target, headers: Record<string, string>, body: string, opts: SendOptions): Promise<OutboundResponse> {
  return new Promise<OutboundResponse>((resolvePromise, rejectPromise) => {
    // A fresh agent per attempt: no pooled socket can skip the lookup filter.
    const agent = new https.Agent({ keepAlive: false });
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outcome();
      req.destroy();
      agent.destroy();
    };
    const fail = (err: unknown) => settle(() => rejectPromise(toOutboundError(err)));

    const req = https.request({
      method: 'POST',
      host: target.host,
      port: target.port,
      path: target.path,
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      agent,
      lookup: opts.lookup,
      ...(opts.ca ? { ca: opts.ca } : {}),
    });

    const timer = setTimeout(
      () => fail(new OutboundError('timeout', `The attempt did not complete within ${opts.timeoutMs} ms.`, 'ETIMEDOUT')),
      opts.timeoutMs,
    );

    req.on('error', fail);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      const finish = (truncated: boolean) =>
        settle(() => resolvePromise({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), truncated }));

      res.on('error', fail);
      res.on('data', (chunk: Buffer) => {
        const room = opts.maxResponseBytes - kept;
        if (chunk.length > room) {
          chunks.push(chunk.subarray(0, room));
          kept += room;
          // The cap exists so a hostile endpoint cannot make us buffer without bound.
          finish(true);
          return;
        }
        chunks.push(chunk);
        kept += chunk.length;
      });
      res.on('end', () => finish(false));
    });

    req.end(body);
  });
}

const TLS_MESSAGES: Record<string, string> = {
  ERR_TLS_CERT_ALTNAME_INVALID: "The endpoint's TLS certificate does not match its host name.",
  CERT_HAS_EXPIRED: "The endpoint's TLS certificate has expired.",
  CERT_NOT_YET_VALID: "The endpoint's TLS certificate is not valid yet.",
};

function toOutboundError(err: unknown): OutboundError {
  if (err instanceof OutboundError) return err;
  const e = err as NodeJS.ErrnoException & { library?: string };
  const code = e?.code;
  if (code && isTlsError(code, e?.library)) {
    const message = TLS_MESSAGES[code] ?? `The endpoint's TLS certificate could not be verified or the TLS handshake failed (${code}).`;
    return new OutboundError('tls', message, code, { cause: err });
  }
  const message =
    code === 'ECONNREFUSED'
      ? 'The endpoint refused the connection.'
      : code === 'ECONNRESET'
        ? 'The endpoint closed the connection unexpectedly.'
        : `The connection to the endpoint failed${code ? ` (${code})` : ''}.`;
  return new OutboundError('connection', message, code, { cause: err });
}

function isTlsError(code: string, library: string | undefined): boolean {
  return (
    code.startsWith('ERR_TLS_') ||
    code.startsWith('ERR_SSL_') ||
    code.includes('CERT') ||
    code === 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' ||
    code === 'HOSTNAME_MISMATCH' ||
    code === 'EPROTO' ||
    library === 'SSL routines'
  );
}
