/**
 * What the project's command-line programs (`npm run admin`, `npm run operator`) share: the
 * reading of the command line, `--help` and `--json`, usage mistakes, and the exit codes:
 * 0 done, 1 failed (the message goes to stderr), 2 bad usage (the usage goes to stderr and
 * nothing is done).
 */
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { isUuid } from '../db';

/** A mistake in how the program was called: answered with the usage and exit code 2, before anything is done. */
export class UsageError extends Error {}

/** Where a run reads its environment and writes its output: the process's own, or a test's. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
}

/** The options every program takes. */
const COMMON = { json: { type: 'boolean' }, help: { type: 'boolean' } } as const;

/** A command line as parseArgs reads it with a program's options. */
export type CommandLine<O extends ParseArgsOptionsConfig> = ReturnType<typeof parseArgs<{ args: string[]; options: typeof COMMON & O; allowPositionals: true; strict: true }>>;

export interface CommandLineProgram<O extends ParseArgsOptionsConfig> {
  /** Put before every message on stderr. */
  name: string;
  usage: string;
  /** Its options besides --json and --help. */
  options: O;
  /**
   * Runs the command line (at least one positional: the command) and returns the exit code;
   * throws a UsageError for a usage mistake, anything else for a failure.
   */
  run(commandLine: CommandLine<O>, io: CliIo): Promise<number>;
}

/** Runs one command line of `program` and returns its exit code. */
export async function runCommandLine<const O extends ParseArgsOptionsConfig>(program: CommandLineProgram<O>, argv: string[], io: CliIo): Promise<number> {
  const usageMistake = (message: string): number => {
    io.stderr.write(`${program.name}: ${message}\n\n${program.usage}`);
    return 2;
  };
  let commandLine: CommandLine<O>;
  try {
    commandLine = parseArgs({ args: argv, allowPositionals: true, strict: true, options: { ...COMMON, ...program.options } }) as CommandLine<O>;
  } catch (error) {
    // Unknown options and missing option values are usage mistakes like any other.
    return usageMistake(error instanceof Error ? error.message : String(error));
  }
  if ((commandLine.values as { help?: boolean }).help) {
    io.stdout.write(program.usage);
    return 0;
  }
  if (commandLine.positionals.length === 0) return usageMistake('a command is required');
  try {
    return await program.run(commandLine, io);
  } catch (error) {
    if (error instanceof UsageError) return usageMistake(error.message);
    io.stderr.write(`${program.name}: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}

/** A program's entry point: runs the process's command line. */
export function runAsProcess(main: (argv: string[], io: CliIo) => Promise<number>): void {
  // The exit code is set, not forced: the process ends once stdout has taken every byte, also into a pipe.
  void main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env }).then((code) => {
    process.exitCode = code;
  });
}

type OptionValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** The option's value, trimmed; undefined when it is not given. A blank value is a usage mistake. */
export function optionText<V extends OptionValues>(values: V, name: keyof V & string): string | undefined {
  const value = values[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new UsageError(`--${name} takes a value`);
  if (value.trim() === '') throw new UsageError(`--${name} must not be empty`);
  return value.trim();
}

/** The value of an option the command cannot do without. */
export function requiredOption<V extends OptionValues>(values: V, name: keyof V & string): string {
  const value = optionText(values, name);
  if (value === undefined) throw new UsageError(`--${name} is required`);
  return value;
}

/**
 * An id option (ids are uuids), lower-cased; undefined when an optional one is not given.
 * Anything else would reach the service or the database as "not found" or a type error
 * instead of a clear refusal.
 */
export function idOption<V extends OptionValues>(values: V, name: keyof V & string, required: true): string;
export function idOption<V extends OptionValues>(values: V, name: keyof V & string, required?: false): string | undefined;
export function idOption<V extends OptionValues>(values: V, name: keyof V & string, required = false): string | undefined {
  const value = required ? requiredOption(values, name) : optionText(values, name);
  if (value === undefined) return undefined;
  if (!isUuid(value)) throw new UsageError(`--${name} must be an id (uuid), got "${value}"`);
  return value.toLowerCase();
}
