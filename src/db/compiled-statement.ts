import { CompiledQuery, type Compilable, type Kysely, type RawBuilder } from 'kysely';
import { prepareStatement } from './prepared';

/**
 * Stands for a named value while a statement is compiled; the value of each execution takes
 * its place. A builder that computes with it (`${p.now}` in a string, `p.limit + 1`) would
 * compile the stand-in into the statement's text: converting one to a primitive throws.
 */
class Slot {
  constructor(readonly name: string) {}

  [Symbol.toPrimitive](): never {
    throw new Error(`The statement's value "${this.name}" was computed with while the statement was built; place it as a parameter instead.`);
  }
}

/**
 * A statement Kysely builds and compiles once, then executes with each call's values.
 * Building a statement of several CTEs costs more CPU than its round trip, and the engine
 * runs these for every delivery. The builder only places its values (`p.x`) in the
 * statement, never computes with them: each is a stand-in while the statement compiles.
 *
 * Checked both ways: every value the builder read must be a parameter of the compiled
 * statement (else the statement would not vary with it), and every execution must give a
 * value for every parameter (undefined would go out as NULL).
 */
export class CompiledStatement<DB, P extends object, R> {
  private compiled: CompiledQuery<R> | null = null;

  /**
   * `prepare`: sent as a named prepared statement (prepareStatement), parsed once per
   * connection; for a statement whose planning costs much next to its execution.
   */
  constructor(
    private readonly build: (k: Kysely<DB>, p: P) => Compilable<R> | RawBuilder<R>,
    private readonly options: { prepare?: boolean } = {},
  ) {}

  async execute(k: Kysely<DB>, values: P): Promise<R[]> {
    const compiled = this.compile(k);
    const parameters = compiled.parameters.map((parameter) => {
      if (!(parameter instanceof Slot)) return parameter;
      const value = values[parameter.name as keyof P];
      if (value === undefined) throw new Error(`No value for "${parameter.name}" of a compiled statement.`);
      return value;
    });
    const result = await k.executeQuery<R>(CompiledQuery.raw(compiled.sql, parameters));
    return result.rows;
  }

  private compile(k: Kysely<DB>): CompiledQuery<R> {
    if (this.compiled) return this.compiled;
    const read = new Set<string>();
    const slots = new Proxy(
      {},
      {
        get: (_, name) => {
          if (typeof name !== 'string') return undefined;
          read.add(name);
          return new Slot(name);
        },
      },
    ) as P;
    const built = this.build(k, slots);
    const compiled = 'isRawBuilder' in built ? built.compile(k) : built.compile();
    const placed = new Set(compiled.parameters.filter((p): p is Slot => p instanceof Slot).map((p) => p.name));
    const unplaced = [...read].filter((name) => !placed.has(name));
    if (unplaced.length > 0) throw new Error(`A compiled statement read ${unplaced.map((n) => `"${n}"`).join(', ')} but did not place it as a parameter.`);
    if (this.options.prepare) prepareStatement(compiled.sql);
    this.compiled = compiled;
    return compiled;
  }
}
