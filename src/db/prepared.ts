import type { Pool, PoolClient } from 'pg';

/** Statement texts to prepare, each under a name of its own. */
const names = new Map<string, string>();

/**
 * Has every pooled connection send `text` as a named prepared statement: PostgreSQL then
 * parses it once per connection and may keep its plan, instead of parsing and planning it
 * at every execution (Kysely sends every statement unnamed). For a statement of many CTEs
 * that a hot path runs, planning costs about as much as a small insert's whole execution.
 * Register only statements built once, whose text never changes (CompiledStatement's).
 * A prepared statement needs a session per connection: openDatabase installs the hook only
 * where each connection has one (not on the embedded PGlite server, whose connections
 * share one session; see Database.embedded), and elsewhere the same texts go out unnamed.
 */
export function prepareStatement(text: string): void {
  if (!names.has(text)) names.set(text, `prepared_${names.size + 1}`);
}

/** The pool hook that sends the registered texts under their names (openDatabase installs it). */
export function sendPreparedStatements(pool: Pool): void {
  pool.on('connect', (client: PoolClient) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (text: unknown, ...rest: unknown[]) => {
      const name = typeof text === 'string' ? names.get(text) : undefined;
      if (name === undefined || (rest.length > 0 && !Array.isArray(rest[0]))) return query(text, ...rest);
      const [values, ...callback] = rest;
      return query({ name, text, values }, ...callback);
    };
  });
}
