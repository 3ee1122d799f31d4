import { apiError } from '../errors';
import { isUuid } from './ids';

/** Keyset cursor over (createdAt or another instant, id); opaque to clients. */
export interface Cursor {
  at: string;
  id: string;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export function pageSizeOf(requested: number): number {
  if (requested < 0) throw apiError('INVALID_ARGUMENT', 'pageSize must not be negative.');
  if (requested === 0) return DEFAULT_PAGE_SIZE;
  return Math.min(requested, MAX_PAGE_SIZE);
}

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor)).toString('base64url');
}

/** 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z: the instants PostgreSQL and proto3 JSON both take. */
export const FIRST_INSTANT_MS = -62_135_596_800_000;
export const LAST_INSTANT_MS = 253_402_300_799_999;

/**
 * A page token is opaque to clients but not trusted: a forged one whose id is not a uuid
 * or whose instant is outside years 1-9999 is refused here rather than failing the query.
 */
export function decodeCursor(token: string): Cursor | null {
  if (!token) return null;
  try {
    const value = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as Partial<Cursor>;
    const at = typeof value.at === 'string' ? Date.parse(value.at) : Number.NaN;
    if (typeof value.id === 'string' && isUuid(value.id) && at >= FIRST_INSTANT_MS && at <= LAST_INSTANT_MS) {
      return { at: value.at as string, id: value.id };
    }
  } catch {
    // Falls through to the refusal below.
  }
  throw apiError('PAGE_TOKEN_INVALID', 'pageToken is not a token this service issued.');
}

/**
 * The filter that continues a keyset page after `cursor`, ordered by (`field`, id):
 * ascending or descending on the field, ids ascending within one instant.
 */
export function afterCursor<F extends string>(
  field: F,
  cursor: Cursor | null,
  direction: 'asc' | 'desc',
): Record<string, unknown> {
  if (!cursor) return {};
  const at = new Date(cursor.at);
  return { $or: [{ [field]: { [direction === 'asc' ? '$gt' : '$lt']: at } }, { [field]: at, id: { $gt: cursor.id } }] };
}

/** Splits the `limit + 1` rows a keyset query read into the page and the token of the next one. */
export function pageOf<T extends { id: string }>(rows: T[], limit: number, instantOf: (row: T) => Date): { page: T[]; nextPageToken: string } {
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return { page, nextPageToken: rows.length > limit && last ? encodeCursor({ at: instantOf(last).toISOString(), id: last.id }) : '' };
}
