import type { QueryCreator } from 'kysely';

/**
 * A module's part of a statement that another module runs: the part's owner writes it with
 * Kysely against `Needs`, the tables and the CTEs (by name, with their rows' columns) it
 * reads, and the statement places it in its WITH list. The caller's query creator must
 * hold every name of `Needs` with those columns, so renaming a CTE, dropping a column or
 * changing its type on either side fails to compile instead of failing in PostgreSQL.
 *
 * Kysely's query creators are invariant in their tables, so a creator with more CTEs than
 * `Needs` is not one of `Needs`; the part is generic over the caller's tables instead,
 * bounded by `Needs`, and sees them as `Needs` only. `args` are the part's values, placed
 * as parameters (a CompiledStatement's stand-ins).
 */
export function statementPart<Needs, Args extends unknown[], Out>(
  build: (qc: QueryCreator<Needs>, ...args: Args) => Out,
): <DB extends Needs>(qc: QueryCreator<DB>, ...args: Args) => Out {
  return (qc, ...args) => build(qc as unknown as QueryCreator<Needs>, ...args);
}

/**
 * statementPart for a part of several CTEs: it adds `Adds` (each CTE's name and row) to the
 * caller's WITH list, for the caller's next CTEs and its final query to read. The part's
 * CTEs must produce exactly the rows `Adds` declares.
 */
export function statementParts<Needs, Adds, Args extends unknown[] = []>(
  build: (qc: QueryCreator<Needs>, ...args: Args) => QueryCreator<Needs & Adds>,
): <DB extends Needs>(qc: QueryCreator<DB>, ...args: Args) => QueryCreator<DB & Adds> {
  return <DB extends Needs>(qc: QueryCreator<DB>, ...args: Args) => build(qc as unknown as QueryCreator<Needs>, ...args) as unknown as QueryCreator<DB & Adds>;
}
