import { UniqueConstraintViolationException } from '@mikro-orm/core';

/** True when a write lost a race against a unique index (optionally a given constraint). */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const pgError = error as { code?: string; constraint?: string; cause?: { code?: string; constraint?: string } };
  const code = pgError?.code ?? pgError?.cause?.code;
  const name = pgError?.constraint ?? pgError?.cause?.constraint;
  const unique = error instanceof UniqueConstraintViolationException || code === '23505';
  return unique && (constraint === undefined || name === constraint || String((error as Error).message).includes(constraint));
}

/** SQLSTATE classes and codes that mean "the database cannot be reached or is going away". */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '08000', '08001', '08003', '08004', '08006', '08007']);
const UNAVAILABLE_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
const UNAVAILABLE_MESSAGES = [
  'Connection terminated',
  'connection terminated',
  'Client has encountered a connection error',
  'timeout exceeded when trying to connect',
  'Client was closed',
  'Cannot use a pool after calling end',
  'terminating connection',
];

/**
 * True when an error says PostgreSQL is unreachable or restarting, rather than that the
 * statement was wrong: worth waiting for and trying again, never a bug to report.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === 'string' && (UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNOS.has(code))) return true;
    if (typeof message === 'string' && UNAVAILABLE_MESSAGES.some((m) => message.includes(m))) return true;
  }
  return false;
}
