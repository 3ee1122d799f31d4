import { UniqueConstraintViolationException } from '@mikro-orm/core';

/** True when a write lost a race against a unique index (optionally a given constraint). */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const pgError = error as { code?: string; constraint?: string; cause?: { code?: string; constraint?: string } };
  const code = pgError?.code ?? pgError?.cause?.code;
  const name = pgError?.constraint ?? pgError?.cause?.constraint;
  const unique = error instanceof UniqueConstraintViolationException || code === '23505';
  return unique && (constraint === undefined || name === constraint || String((error as Error).message).includes(constraint));
}
