import { sql, type RawBuilder } from 'kysely';

/**
 * A timestamptz column as epoch milliseconds, truncated as a JavaScript Date truncates
 * microseconds. The driver hands timestamptz to MikroORM as text; answers that carry many
 * timestamps read them as numbers instead of building a Date only to take it apart again.
 */
export function epochMs<T extends number | null = number>(column: string): RawBuilder<T> {
  return sql<T>`floor(extract(epoch from ${sql.ref(column)}) * 1000)::float8`;
}
