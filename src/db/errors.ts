import { ConnectionException, UniqueConstraintViolationException } from '@mikro-orm/core';

/** True when a write lost a race against a unique index (optionally a given constraint). */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const pgError = error as { code?: string; constraint?: string; cause?: { code?: string; constraint?: string } };
  const code = pgError?.code ?? pgError?.cause?.code;
  const name = pgError?.constraint ?? pgError?.cause?.constraint;
  const unique = error instanceof UniqueConstraintViolationException || code === '23505';
  return unique && (constraint === undefined || name === constraint || String((error as Error).message).includes(constraint));
}

/** Node socket errors that mean PostgreSQL could not be reached or the connection broke. */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * SQLSTATEs of a server that is there but will not serve: class 08 (connection
 * exception), 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
 * 53300 too_many_connections, 3D000 (the database is gone).
 */
const UNAVAILABLE_SQLSTATES = /^(08...|57P0[123]|53300|3D000)$/;

/** What pg and pg-pool say, without a code, when a connection dies or none can be had in time. */
const UNAVAILABLE_MESSAGES = /Connection terminated|connection error and is not queryable|timeout exceeded when trying to connect|Connection ended|Cannot use a pool after calling end|Client was closed|terminating connection/i;

/**
 * True when an error (or any error in its cause chain) says the database cannot be
 * reached or will not serve now, as opposed to refusing this one statement. The one place
 * that knows how pg, pg-pool and MikroORM spell an outage; callers answer UNAVAILABLE.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let current = error, depth = 0; current && depth < 8; depth++) {
    if (current instanceof ConnectionException) return true;
    const { code, message, cause } = current as { code?: unknown; message?: unknown; cause?: unknown };
    if (typeof code === 'string' && (UNREACHABLE_CODES.has(code) || UNAVAILABLE_SQLSTATES.test(code))) return true;
    if (typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message)) return true;
    if (current instanceof AggregateError && current.errors.some(isDatabaseUnavailable)) return true;
    current = cause;
  }
  return false;
}
