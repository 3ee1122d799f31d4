import { CompiledQuery, type Compilable, type Kysely } from 'kysely';
import { prepareStatement } from '../db';

/** Stands for a named value while a statement is compiled; the value of each execution takes its place. */
class Slot {
  constructor(readonly name: string) {}
}

/**
 * A statement Kysely builds and compiles once, then executes with each call's values.
 * Building a statement of several CTEs costs more CPU than its round trip, and the engine
 * runs these for every delivery. The builder only places its values (`p.x`) in the
 * statement, never computes with them: each is a stand-in while the statement compiles.
 */
export class CompiledStatement<DB, P extends object, R> {
  private compiled: CompiledQuery<R> | null = null;

  /**
   * `prepare`: sent as a named prepared statement (db's prepareStatement), parsed once per
   * connection; for a statement whose planning costs much next to its execution.
   */
  constructor(
    private readonly build: (k: Kysely<DB>, p: P) => Compilable<R>,
    private readonly options: { prepare?: boolean } = {},
  ) {}

  async execute(k: Kysely<DB>, values: P): Promise<R[]> {
    if (!this.compiled) {
      this.compiled = this.build(k, new Proxy({}, { get: (_, name) => new Slot(String(name)) }) as P).compile();
      if (this.options.prepare) prepareStatement(this.compiled.sql);
    }
    const parameters = this.compiled.parameters.map((parameter) => (parameter instanceof Slot ? values[parameter.name as keyof P] : parameter));
    const result = await k.executeQuery<R>(CompiledQuery.raw(this.compiled.sql, parameters));
    return result.rows;
  }
}
