import { apiError } from '../errors';

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

export function decodeCursor(token: string): Cursor | null {
  if (!token) return null;
  try {
    const value = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as Partial<Cursor>;
    if (typeof value.at === 'string' && typeof value.id === 'string' && !Number.isNaN(Date.parse(value.at))) {
      return { at: value.at, id: value.id };
    }
  } catch {
    // Falls through to the refusal below.
  }
  throw apiError('PAGE_TOKEN_INVALID', 'pageToken is not a token this service issued.');
}
