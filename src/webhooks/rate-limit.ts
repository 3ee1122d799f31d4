import type { Pool, QueryConfig } from 'pg';
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import { apiError } from '../errors';

/** The contract's webhook bucket: 300 test calls per minute per organization. */
export const WEBHOOK_BUCKET = { points: 300, durationSeconds: 60 } as const;

export interface RateDecision {
  headers: Record<string, string>;
}

/**
 * Counts in PostgreSQL, so every instance of the service shares one bucket per
 * organization. Throws RATE_LIMITED (429) with Retry-After when the bucket is empty.
 */
export class WebhookRateLimiter {
  private readonly limiter: RateLimiterPostgres;

  constructor(pool: Pool) {
    this.limiter = new RateLimiterPostgres({
      // Unnamed statements only: a named one belongs to the database session, and the
      // embedded PGlite server puts every connection on one session, where the name a
      // connection prepared already exists for the next one ("prepared statement ...
      // already exists" once the pool replaced an idle connection).
      storeClient: { query: (query: QueryConfig) => pool.query({ text: query.text, values: query.values }) },
      storeType: 'pool',
      tableName: 'rate_limits',
      tableCreated: true,
      keyPrefix: 'webhook',
      points: WEBHOOK_BUCKET.points,
      duration: WEBHOOK_BUCKET.durationSeconds,
    });
  }

  async take(organizationId: string): Promise<RateDecision> {
    try {
      const res = await this.limiter.consume(organizationId);
      return { headers: headersOf(res, false) };
    } catch (error) {
      if (!(error instanceof RateLimiterRes)) throw error;
      throw apiError('RATE_LIMITED', `At most ${WEBHOOK_BUCKET.points} webhook test calls per minute; retry later.`, {
        headers: headersOf(error, true),
      });
    }
  }
}

function headersOf(res: RateLimiterRes, refused: boolean): Record<string, string> {
  const reset = Math.max(1, Math.ceil(res.msBeforeNext / 1000));
  return {
    'ratelimit-limit': String(WEBHOOK_BUCKET.points),
    'ratelimit-remaining': String(Math.max(0, res.remainingPoints)),
    'ratelimit-reset': String(reset),
    ...(refused ? { 'retry-after': String(reset) } : {}),
  };
}
