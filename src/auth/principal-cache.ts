import { Client } from 'pg';
import type { Logger } from '../config';
import type { CustomerPrincipal } from './principal';

/** The channel the api_keys and users triggers notify on (migration PrincipalNotices). */
export const PRINCIPAL_CHANNEL = 'principal_changed';

export interface CachedPrincipal {
  readonly principal: CustomerPrincipal;
  /** When the key's last use was last recorded (ms); authenticate() moves it. */
  lastUsedAt: number;
}

export interface PrincipalCacheOptions {
  connectionString: string;
  logger: Logger;
  /** How long an entry is trusted at most, notices or not. */
  ttlMs?: number;
  maxEntries?: number;
  /** Wait before listening again after the notice connection is lost. */
  retryMs?: number;
  now?: () => number;
}

interface Entry extends CachedPrincipal {
  expiresAt: number;
}

/**
 * Authenticated API keys, kept for a short while so that a busy key costs no lookup per
 * call. Keyed by the key's hash; only successful lookups are kept.
 *
 * It is used only while it hears about changes: triggers on `api_keys` and `users`
 * notify {@link PRINCIPAL_CHANNEL} when a commit changes anything a principal is made of
 * (revocation, scopes, role, owner, deletion), and every instance empties its cache on
 * the notice. While the listening connection is down the cache answers nothing and keeps
 * nothing, so a revocation never waits on a lost connection; entries also expire after
 * `ttlMs`. A lookup that overlapped a notice is not kept (see {@link version}).
 */
export class PrincipalCache {
  private readonly entries = new Map<string, Entry>();
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly retryMs: number;
  private readonly now: () => number;
  private client: Client | null = null;
  private listening = false;
  private generation = 0;
  private closed = false;
  private retry: NodeJS.Timeout | null = null;
  private failuresInRow = 0;

  constructor(private readonly options: PrincipalCacheOptions) {
    this.ttlMs = options.ttlMs ?? 30_000;
    this.maxEntries = options.maxEntries ?? 10_000;
    this.retryMs = options.retryMs ?? 1_000;
    this.now = options.now ?? Date.now;
  }

  /** Starts listening. A failure is logged and retried; until then the cache stays off. */
  async start(): Promise<void> {
    await this.listen();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    this.stopUsing();
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  /** True while change notices arrive, the only time the cache is used. */
  get live(): boolean {
    return this.listening;
  }

  /** Taken before a lookup and handed to {@link set}: a notice in between drops the result. */
  get version(): number {
    return this.generation;
  }

  get(keyHash: string): CachedPrincipal | null {
    if (!this.listening) return null;
    const entry = this.entries.get(keyHash);
    if (!entry) return null;
    if (entry.expiresAt <= this.now()) {
      this.entries.delete(keyHash);
      return null;
    }
    return entry;
  }

  set(keyHash: string, principal: CustomerPrincipal, lastUsedAt: number, version: number): void {
    if (!this.listening || version !== this.generation) return;
    if (this.entries.size >= this.maxEntries && !this.entries.has(keyHash)) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    const frozen = Object.freeze({ ...principal, scopes: Object.freeze([...principal.scopes]) });
    this.entries.set(keyHash, { principal: frozen, lastUsedAt, expiresAt: this.now() + this.ttlMs });
  }

  private forget(): void {
    this.generation++;
    this.entries.clear();
  }

  private stopUsing(): void {
    this.listening = false;
    this.forget();
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    const client = new Client({ connectionString: this.options.connectionString });
    this.client = client;
    client.on('notification', () => this.forget());
    client.on('error', (error) => this.lost(client, error));
    client.on('end', () => this.lost(client, null));
    try {
      await client.connect();
      await client.query(`listen ${PRINCIPAL_CHANNEL}`);
    } catch (error) {
      this.lost(client, error);
      return;
    }
    if (this.client !== client) return;
    // Whatever changed while nobody listened is unknown: start empty.
    this.forget();
    this.listening = true;
    this.failuresInRow = 0;
    this.options.logger.info('API key cache on: listening for changes');
  }

  private lost(client: Client, error: unknown): void {
    if (this.client !== client) return;
    this.client = null;
    const wasListening = this.listening;
    this.stopUsing();
    client.end().catch(() => undefined);
    if (this.closed) return;
    // Said once per outage, not once per retry.
    if (wasListening || ++this.failuresInRow === 1) {
      this.options.logger.warn({ err: error }, 'API key cache off: no change notices; every call looks its key up until they are back');
    }
    this.retry = setTimeout(() => {
      this.retry = null;
      void this.listen();
    }, this.retryMs);
    this.retry.unref();
  }
}
