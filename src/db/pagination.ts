import { isUuid } from './ids';

/**
 * Keyset cursor over (createdAt or another instant, id), the one page token format of
 * every list: opaque to clients. The id is a uuid, or a row number (the audit trail's).
 */
export interface Cursor {
  at: string;
  id: string;
}

/**
 * A page request this layer cannot serve, by the stable code the API answers with; the
 * service edge (the request-context interceptor) turns it into that API error.
 */
export class PageRequestError extends Error {
  override readonly name = 'PageRequestError';
  constructor(
    readonly code: 'PAGE_TOKEN_INVALID' | 'INVALID_ARGUMENT',
    message: string,
  ) {
    super(message);
  }
}

const ROW_NUMBER = /^\d{1,19}$/;

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export function pageSizeOf(requested: number): number {
  if (requested < 0) throw new PageRequestError('INVALID_ARGUMENT', 'pageSize must not be negative.');
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
export function decodeCursor(token: string, ids: 'uuid' | 'row number' = 'uuid'): Cursor | null {
  if (!token) return null;
  try {
    const value = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as Partial<Cursor>;
    const at = typeof value.at === 'string' ? Date.parse(value.at) : Number.NaN;
    const idValid = typeof value.id === 'string' && (ids === 'uuid' ? isUuid(value.id) : ROW_NUMBER.test(value.id));
    if (idValid && at >= FIRST_INSTANT_MS && at <= LAST_INSTANT_MS) {
      return { at: value.at as string, id: value.id as string };
    }
  } catch {
    // Falls through to the refusal below.
  }
  throw new PageRequestError('PAGE_TOKEN_INVALID', 'pageToken is not a token this service issued.');
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
