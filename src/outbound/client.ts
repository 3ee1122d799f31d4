/**
 * The only way the service sends HTTP to customer-controlled URLs (DESIGN decision 7):
 * https only, TLS verified, the SSRF filter applied to the addresses actually dialled,
 * no redirects, one deadline for the request on the wire, a capped response body. Connections
 * to a receiver are kept and reused, within an age bound, so the filter runs once per
 * connection rather than once per request.
 */
import type { LookupAddress, LookupOptions } from 'node:dns';
import { promises as dnsPromises } from 'node:dns';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { createAddressPolicy, FORBIDDEN_REASON_TEXT, type AddressPolicy, type ForbiddenReason } from './address-policy';

/**
 * Why an attempt failed. All but the last two are the receiver's side of the network (or its
 * URL): the attempt counts. `aborted` is ours (the attempt was cancelled) and `not_sent` means
 * the caller's beforeSend refused; neither counts unless the request had already been written.
 */
export type OutboundErrorKind = 'invalid_url' | 'blocked_address' | 'dns' | 'timeout' | 'tls' | 'connection' | 'aborted' | 'not_sent';

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
    options?: { cause?: unknown; dispatched?: boolean },
  ) {
    super(message, options);
    this.dispatched = options?.dispatched ?? false;
  }

  /** True when the request had been written to the receiver's connection: it may have arrived. */
  readonly dispatched: boolean;
}

export interface OutboundResponse {
  status: number;
  body: Buffer;
  /** True when the endpoint sent more than maxResponseBytes; the rest was not read. */
  truncated: boolean;
  /** The Retry-After header as the receiver sent it (at most 64 characters), null without one. */
  retryAfter: string | null;
}

export interface PostOptions {
  /** Cancels the attempt (the POST is aborted wherever it is). */
  signal?: AbortSignal;
  /**
   * Called once, when the connection to the receiver stands (TLS done) and before a byte of
   * the request is written; the deadline does not run meanwhile. Resolving false, or
   * throwing, sends nothing and fails the post with `not_sent`.
   */
  beforeSend?: () => Promise<boolean>;
}

export interface OutboundClient {
  post(url: string, headers: Record<string, string>, body: string, options?: PostOptions): Promise<OutboundResponse>;
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: 4 | 6 }[]>;

export interface OutboundOptions {
  /** CIDRs exempt from the SSRF filter (tests: 127.0.0.0/8, ::1/128). Empty in production. */
  allowCidrs?: string[];
  /** PEM CA trusted in addition to the default roots (never instead of them). */
  extraCa?: string;
  /**
   * Deadline for the request on the wire: DNS, connect, TLS, request and reading the response.
   * It starts when the request has a connection: a wait for one of our pooled connections is
   * our queueing, never the receiver's time.
   */
  timeoutMs: number;
  /** Response bytes kept; the connection is dropped once more arrive. */
  maxResponseBytes: number;
  /** Replaces DNS resolution (tests); every address returned is still checked. */
  lookup?: Resolver;
  /** Connections kept open to one receiver (host and port), busy and idle together. */
  connectionsPerEndpoint?: number;
  /**
   * A connection older than this is not used for another request, so the address it was
   * dialled at (checked when it was opened) is at most this stale.
   */
  connectionMaxAgeMs?: number;
}

const DEFAULT_CONNECTIONS_PER_ENDPOINT = 16;
const DEFAULT_CONNECTION_MAX_AGE_MS = 60_000;
/**
 * An idle connection is closed after this, before Node's default server keep-alive timeout
 * (5 s) and the usual load balancers' (60 s) would close it under a request just written.
 * A shorter `Keep-Alive: timeout=` announced by the receiver wins.
 */
const IDLE_CONNECTION_MS = 4_000;

const defaultResolver: Resolver = async (hostname) => {
  const found = await dnsPromises.lookup(hostname, { all: true, order: 'verbatim' });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

export function createOutboundClient(options: OutboundOptions): OutboundClient {
  const policy = createAddressPolicy(options.allowCidrs ?? []);
  const agent = new ReceiverConnections({
    keepAlive: true,
    maxSockets: options.connectionsPerEndpoint ?? DEFAULT_CONNECTIONS_PER_ENDPOINT,
    timeout: IDLE_CONNECTION_MS,
    maxAgeMs: options.connectionMaxAgeMs ?? DEFAULT_CONNECTION_MAX_AGE_MS,
    // Every new connection dials through the guarded lookup: reuse never skips the filter.
    lookup: guardedLookup(options.lookup ?? defaultResolver, policy),
    // Built once: a `ca` list per request would parse ~150 roots for every connection.
    secureContext: tls.createSecureContext(options.extraCa ? { ca: [...tls.getCACertificates('default'), options.extraCa] } : {}),
  });
  const sendOptions: SendOptions = { timeoutMs: options.timeoutMs, maxResponseBytes: options.maxResponseBytes, agent };

  return {
    async post(url, headers, body, options = {}) {
      return send(parseTarget(url, policy), headers, body, sendOptions, options);
    },
  };
}

/**
 * The pool of connections to receivers, keyed by host and port (the trust store and the
 * address filter are the client's, the same for every connection). Node's Agent closes
 * idle connections but has no maximum age, so each connection's opening time is kept and
 * a connection past `maxAgeMs` is closed instead of being pooled or reused: a receiver's
 * DNS change reaches us, through the filter, within that bound.
 */
class ReceiverConnections extends https.Agent {
  private readonly maxAgeMs: number;
  private readonly openedAt = new WeakMap<object, number>();
  private readonly established = new WeakSet<object>();

  constructor(options: https.AgentOptions & { maxAgeMs: number }) {
    const { maxAgeMs, ...agentOptions } = options;
    super(agentOptions);
    this.maxAgeMs = maxAgeMs;
  }

  override createConnection(...args: Parameters<https.Agent['createConnection']>): ReturnType<https.Agent['createConnection']> {
    const socket = super.createConnection(...args);
    if (socket) {
      this.openedAt.set(socket, performance.now());
      socket.once('secureConnect', () => this.established.add(socket));
    }
    return socket;
  }

  /**
   * Calls `ready` once the connection's TLS handshake is done: at once for a connection that
   * served before. `req.reusedSocket` cannot say so: a request that waited for a free
   * connection (all `maxSockets` busy) is handed a pooled one without being marked reused.
   */
  whenEstablished(socket: Duplex, ready: () => void): void {
    if (this.established.has(socket)) ready();
    else socket.once('secureConnect', ready);
  }

  override keepSocketAlive(socket: Duplex): boolean {
    if (this.expired(socket)) return false;
    return super.keepSocketAlive(socket) as unknown as boolean;
  }

  /** Closes the idle connections past their age, so the next request cannot be given one. */
  retireExpired(): void {
    for (const [name, idle] of Object.entries(this.freeSockets)) {
      const expired = idle?.filter((socket) => this.expired(socket)) ?? [];
      if (expired.length === 0) continue;
      for (const socket of expired) socket.destroy();
      // The Agent hands out the last socket of this list: a destroyed one must leave it now,
      // not when its 'close' event comes.
      const live = idle!.filter((socket) => !socket.destroyed);
      idle!.splice(0, idle!.length, ...live);
      if (live.length === 0) delete (this.freeSockets as Record<string, unknown>)[name];
    }
  }

  private expired(socket: object): boolean {
    return performance.now() - (this.openedAt.get(socket) ?? 0) >= this.maxAgeMs;
  }
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
  agent: ReceiverConnections;
}

function send(target: Target, headers: Record<string, string>, body: string, opts: SendOptions, post: PostOptions): Promise<OutboundResponse> {
  return new Promise<OutboundResponse>((resolvePromise, rejectPromise) => {
    let startedAt = 0;
    let dispatched = false;
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    // Only a response read to its end leaves the connection to the pool: any other ending
    // (error, deadline, cancel, refusal, a body cut at the cap) may leave bytes in flight.
    const settle = (outcome: () => void, responseComplete = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      post.signal?.removeEventListener('abort', onAbort);
      outcome();
      if (!responseComplete) req.destroy();
    };
    const fail = (err: unknown) => settle(() => rejectPromise(toOutboundError(err, dispatched)));
    const arm = (ms: number) => {
      // Judged after the I/O that arrived by then (setImmediate runs after the poll phase): on a
      // busy event loop the deadline's timer and an answer received in time come due together,
      // and timers run first.
      timer = setTimeout(
        () => setImmediate(() => fail(new OutboundError('timeout', `The attempt did not complete within ${opts.timeoutMs} ms.`, 'ETIMEDOUT', { dispatched }))),
        Math.max(0, ms),
      );
    };
    const onAbort = () => fail(new OutboundError('aborted', 'The attempt was cancelled.', 'ABORT_ERR', { dispatched }));
    if (post.signal?.aborted) {
      rejectPromise(new OutboundError('aborted', 'The attempt was cancelled before it started.', 'ABORT_ERR'));
      return;
    }
    post.signal?.addEventListener('abort', onAbort, { once: true });

    opts.agent.retireExpired();
    const req = https.request({
      method: 'POST',
      host: target.host,
      port: target.port,
      path: target.path,
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      agent: opts.agent,
    });

    // Nothing is written before the connection stands, so the caller can still decide not
    // to send (and an attempt that never got this far never reached the receiver).
    const dispatch = async () => {
      clearTimeout(timer);
      const connectedAfter = Date.now() - startedAt;
      let go: boolean;
      try {
        go = post.beforeSend ? await post.beforeSend() : true;
      } catch (cause) {
        if (!settled) settle(() => rejectPromise(new OutboundError('not_sent', 'The request was not sent.', 'NOT_SENT', { cause })));
        return;
      }
      if (settled) return;
      if (!go) return settle(() => rejectPromise(new OutboundError('not_sent', 'The request was not sent.', 'NOT_SENT')));
      dispatched = true;
      arm(opts.timeoutMs - connectedAfter);
      req.end(body);
    };
    // The deadline starts when the request is handed a connection (a new one still to dial, or
    // a pooled one): while every connection to the receiver is busy it waits in the agent's
    // queue unsent, and that wait is ours. A pooled connection stands already and will not emit
    // 'secureConnect' again.
    req.once('socket', (socket) => {
      startedAt = Date.now();
      arm(opts.timeoutMs);
      opts.agent.whenEstablished(socket, () => void dispatch());
    });

    req.on('error', fail);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      const retryAfter = res.headers['retry-after']?.slice(0, 64) ?? null;
      const finish = (truncated: boolean) =>
        settle(() => resolvePromise({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), truncated, retryAfter }), !truncated);

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
  });
}

const TLS_MESSAGES: Record<string, string> = {
  ERR_TLS_CERT_ALTNAME_INVALID: "The endpoint's TLS certificate does not match its host name.",
  CERT_HAS_EXPIRED: "The endpoint's TLS certificate has expired.",
  CERT_NOT_YET_VALID: "The endpoint's TLS certificate is not valid yet.",
};

function toOutboundError(err: unknown, dispatched: boolean): OutboundError {
  if (err instanceof OutboundError) return err;
  const e = err as NodeJS.ErrnoException & { library?: string };
  const code = e?.code;
  if (code && isTlsError(code, e?.library)) {
    const message = TLS_MESSAGES[code] ?? `The endpoint's TLS certificate could not be verified or the TLS handshake failed (${code}).`;
    return new OutboundError('tls', message, code, { cause: err, dispatched });
  }
  const message =
    code === 'ECONNREFUSED'
      ? 'The endpoint refused the connection.'
      : code === 'ECONNRESET'
        ? 'The endpoint closed the connection unexpectedly.'
        : `The connection to the endpoint failed${code ? ` (${code})` : ''}.`;
  return new OutboundError('connection', message, code, { cause: err, dispatched });
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
