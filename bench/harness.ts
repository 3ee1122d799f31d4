/**
 * What every figure shares: the run's parameters, its log, the figures collected so far,
 * and the pair logic. A figure and its baseline are measured in ROUNDS back-to-back pairs
 * (the order alternating: A B, B A, A B, ...); each pair gives one ratio, and the figure is
 * the median of those ratios, reported with their spread (min–max) and the load average
 * the pairs ran under. Pass or fail is decided by the median; a figure whose spread lies on
 * both sides of its goal says so instead (see results.ts).
 */
import os from 'node:os';
import path from 'node:path';
import type { Client } from 'pg';
import { withClient } from '../test/support/databases';
import { percentile, startLoad, withCpu, type Load } from './lib';
import type { Segment, SegmentCommand } from './child';
import type { HttpLoadInput } from './load-http';
import { serviceNodeFlags } from '../scripts/service-node-flags';

// ---------------------------------------------------------------------------------------
// Parameters

function numberEnv(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min) throw new Error(`${name} must be a number ≥ ${min} (got "${raw}")`);
  return value;
}

/** Seconds each side of a figure is measured for, in all (split over its pairs). */
export const SECONDS = numberEnv('BENCH_SECONDS', 10, 1);
/** Back-to-back pairs per figure: the figure is the median of their ratios. */
export const PAIRS = Math.round(numberEnv('BENCH_PAIRS', 5, 5));
/** One side's share of one pair. */
export const SEGMENT_SECONDS = SECONDS / PAIRS;
export const CONNECTIONS = 16;
export const WARMUP_SECONDS = Math.min(3, SECONDS / 3);
export const DELIVERIES = Math.round(numberEnv('BENCH_DELIVERIES', 3000, 40));
export const HISTORY_ROWS = Math.round(numberEnv('BENCH_HISTORY_ROWS', 1_000_000, 1000));
export const MEMORY_SMALL = Math.round(numberEnv('BENCH_MEMORY_SMALL', 10_000, 100));
export const MEMORY_LARGE = Math.round(numberEnv('BENCH_MEMORY_LARGE', 100_000, 200));
if (MEMORY_LARGE <= MEMORY_SMALL) throw new Error('BENCH_MEMORY_LARGE must be greater than BENCH_MEMORY_SMALL');
/** After the counted requests, the same mix for this long, then RSS once more: memory after sustained load, not after a count. */
export const MEMORY_SECONDS = numberEnv('BENCH_MEMORY_SECONDS', 60, 1);
export const BUDGET_SECONDS = numberEnv('BENCH_BUDGET_SECONDS', 600, 30);
/** Comma-separated figure ids to run (development); see bench/README.md, "Settings". */
export const ONLY = process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(',').map((s) => s.trim()) : null;
/**
 * Node arguments of the service processes: the flags the service runs with (package.json
 * `config.serviceNodeFlags`), then any extra ones (development: `--cpu-prof --cpu-prof-dir=/tmp/prof`).
 */
export const SERVER_NODE_ARGS = [
  ...serviceNodeFlags(path.resolve(__dirname, '..')),
  ...(process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean),
];
/** Development: keep the database after the run to look into it (the next run drops it). */
export const KEEP_DATABASE = process.env.BENCH_KEEP_DATABASE === '1';
/** BENCH_EXPLAIN=4ms: auto_explain logs the plans of the bench database's statements slower than that (README, knobs). */
export const EXPLAIN = process.env.BENCH_EXPLAIN ?? null;
if (EXPLAIN !== null && !/^\d+(ms|s)$/.test(EXPLAIN)) throw new Error(`BENCH_EXPLAIN must be a duration such as 4ms (got ${EXPLAIN}).`);
export const ADMIN_URL =
  process.env.BENCH_DATABASE_ADMIN_URL ?? process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
/** The database the run creates and drops; another name lets two runs share one PostgreSQL. */
export const DB_NAME = process.env.BENCH_DATABASE_NAME ?? 'publishing_bench';
if (!/^[a-z_][a-z0-9_]*$/.test(DB_NAME)) throw new Error(`BENCH_DATABASE_NAME must be a plain lowercase identifier (got ${DB_NAME}).`);
/** What the results file says of the machine's state: a run on a busy, shared machine is marked as such. */
export const RUN_NOTE = process.env.BENCH_NOTE ?? '';

function databaseUrlOf(name: string): string {
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return url.toString();
}
export const DATABASE_URL = databaseUrlOf(DB_NAME);

const started = Date.now();
export const elapsed = () => (Date.now() - started) / 1000;
export const log = (message: string) => process.stderr.write(`[bench ${elapsed().toFixed(0).padStart(3)}s] ${message}\n`);
export const fmtMs = (value: number | null | undefined) => (value == null ? '?' : `${value.toFixed(2)} ms`);

export function admin<T>(fn: (client: Client) => Promise<T>): Promise<T> {
  return withClient(ADMIN_URL, fn);
}

// ---------------------------------------------------------------------------------------
// Figures

export interface Spread {
  /** Pairs measured. */
  pairs: number;
  min: number;
  max: number;
  /** Every pair's ratio (or derived value), in the order measured. */
  values: number[];
}

export interface Figure {
  id: string;
  figure: string;
  value: number | null;
  unit: string;
  baseline: number | null;
  baselineUnit: string;
  /** The median of the pairs' ratios (or of the derived figure the goal is about: overhead, growth). */
  ratio: number | null;
  ratioLabel: string;
  /** Over the pairs; null for a figure measured once (said in its row). */
  spread: Spread | null;
  /** 1-minute load average before the first and after the last pair. */
  loadAverage: { min: number; max: number } | null;
  goal: string;
  /** From the median; null: no goal, or not measured. */
  pass: boolean | null;
  /** The pairs lie on both sides of the goal: the median alone would pass or fail by luck. */
  spreadCrossesGoal: boolean;
  /** CPU per operation (ms) of the process doing the work on each side: the service, and the baseline's server or loop. */
  cpu?: { value: number | null; baseline: number | null };
  detail: Record<string, unknown>;
  error?: string;
}

export const figures: Figure[] = [];
export const errors: string[] = [];
/** One line per figure on where the time goes (CPU per operation, answer sizes, trajectories). */
export const diagnostics: string[] = [];

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export type FigureInput = Pick<Figure, 'id' | 'figure'> &
  Partial<Pick<Figure, 'value' | 'unit' | 'baseline' | 'baselineUnit' | 'ratioLabel' | 'goal' | 'cpu' | 'loadAverage' | 'detail'>> & {
    /** One value per pair (the figure is their median), or a single measurement. */
    ratios: number[] | number;
    check?: (ratio: number) => boolean;
  };

export function addFigure(input: FigureInput): void {
  const values = (typeof input.ratios === 'number' ? [input.ratios] : input.ratios).filter((v) => Number.isFinite(v));
  const paired = typeof input.ratios !== 'number' && values.length > 1;
  const ratio = values.length > 0 ? median(values) : null;
  const spread = paired ? { pairs: values.length, min: Math.min(...values), max: Math.max(...values), values } : null;
  const { check } = input;
  const pass = check && ratio !== null ? check(ratio) : null;
  figures.push({
    id: input.id,
    figure: input.figure,
    value: input.value ?? null,
    unit: input.unit ?? '',
    baseline: input.baseline ?? null,
    baselineUnit: input.baselineUnit ?? '',
    ratio,
    ratioLabel: input.ratioLabel ?? 'ratio',
    spread,
    loadAverage: input.loadAverage ?? null,
    goal: input.goal ?? '—',
    pass,
    spreadCrossesGoal: Boolean(check && spread && check(spread.min) !== check(spread.max)),
    ...(input.cpu ? { cpu: input.cpu } : {}),
    detail: input.detail ?? {},
  });
}

export function failedFigure(id: string, figure: string, goal: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  errors.push(`${id}: ${message}`);
  log(`${id}: ERROR ${message}`);
  figures.push({
    id,
    figure,
    value: null,
    unit: '',
    baseline: null,
    baselineUnit: '',
    ratio: null,
    ratioLabel: '',
    spread: null,
    loadAverage: null,
    goal,
    pass: null,
    spreadCrossesGoal: false,
    detail: {},
    error: message.split('\n')[0]!.slice(0, 200),
  });
}

// ---------------------------------------------------------------------------------------
// Measuring

/** One measured segment; `cpuSeconds` is the working process's (the service, a reference server or loop). */
export type Measured = Omit<Segment, 'cpuSeconds'> & { cpuSeconds: number | null };

export interface Summary {
  ok: number;
  errors: number;
  non2xx: number;
  seconds: number;
  /** Successful operations per second over all segments. */
  rps: number;
  /** Per segment, in order. */
  segments: number[];
  /** CPU of the working process per operation (null when not measured). */
  cpuMsPerOp: number | null;
  /** Cores the working process kept busy (CPU seconds ÷ wall seconds). */
  cores: number | null;
  latency: { count: number; p50: number; p99: number; mean: number } | null;
  statusCodes: Record<string, number>;
  firstError: string | null;
}

export interface Side {
  label: string;
  segment(): Promise<Measured>;
}

export function summarize(parts: Measured[]): Summary {
  const sum = (f: (m: Measured) => number) => parts.reduce((a, m) => a + f(m), 0);
  const ok = sum((m) => m.ok);
  const errorCount = sum((m) => m.errors);
  const non2xx = sum((m) => m.non2xx);
  const seconds = sum((m) => m.seconds);
  const cpu = parts.every((m) => m.cpuSeconds !== null) ? sum((m) => m.cpuSeconds!) : null;
  const latencies = parts.flatMap((m) => m.latencies ?? []).sort((a, b) => a - b);
  const statusCodes: Record<string, number> = {};
  for (const m of parts) for (const [code, n] of Object.entries(m.statusCodes ?? {})) statusCodes[code] = (statusCodes[code] ?? 0) + n;
  return {
    ok,
    errors: errorCount,
    non2xx,
    seconds,
    rps: seconds > 0 ? ok / seconds : 0,
    segments: parts.map((m) => Math.round((m.ok / m.seconds) * 10) / 10),
    cpuMsPerOp: cpu !== null && ok + errorCount + non2xx > 0 ? (cpu * 1000) / (ok + errorCount + non2xx) : null,
    cores: cpu !== null && seconds > 0 ? cpu / seconds : null,
    latency: latencyOf(latencies),
    statusCodes,
    firstError: parts.find((m) => m.firstError)?.firstError ?? null,
  };
}

function latencyOf(sorted: number[]): Summary['latency'] {
  if (sorted.length === 0) return null;
  return { count: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), mean: sorted.reduce((a, b) => a + b, 0) / sorted.length };
}

export function describe(m: Measured): string {
  const ops = m.ok + m.errors + m.non2xx;
  const cpu = m.cpuSeconds !== null && ops > 0 ? `, ${((m.cpuSeconds * 1000) / ops).toFixed(2)} ms CPU/op` : '';
  const bad = m.errors + m.non2xx > 0 ? `, ${m.non2xx} non-2xx, ${m.errors} errors` : '';
  return `${(m.ok / m.seconds).toFixed(1)}/s (${m.ok} in ${m.seconds.toFixed(2)} s${bad}${cpu})`;
}

/** What `rounds` measured: per side, one segment per round, and the summary over them. */
export interface Rounds {
  /** sides[i][r]: side i's segment of round r. */
  segments: Measured[][];
  summaries: Summary[];
  /** 1-minute load average before the first round and after the last. */
  loadAverage: { min: number; max: number };
}

const load1 = () => Math.round(os.loadavg()[0]! * 100) / 100;

/** The 1-minute load average over a figure measured without `rounds`: mark() at each round, then range(). */
export function loadAverageMeter(): { mark(): void; range(): { min: number; max: number } } {
  const loads = [load1()];
  return { mark: () => void loads.push(load1()), range: () => ({ min: Math.min(...loads), max: Math.max(...loads) }) };
}

/**
 * PAIRS rounds in which every side runs one segment back to back, the order reversed
 * every other round (A B, B A, ...), so drift in the neighbours' load weighs on every side.
 */
export async function rounds(sides: Side[], count = PAIRS): Promise<Rounds> {
  const segments: Measured[][] = sides.map(() => []);
  const load = loadAverageMeter();
  for (let r = 0; r < count; r++) {
    const order = sides.map((_, i) => i);
    if (r % 2 === 1) order.reverse();
    for (const i of order) {
      const measured = await sides[i]!.segment();
      log(`  ${r + 1}/${count} ${sides[i]!.label}: ${describe(measured)}`);
      segments[i]!.push(measured);
    }
    load.mark();
  }
  return { segments, summaries: segments.map(summarize), loadAverage: load.range() };
}

/** Per round, side `a`'s throughput ÷ side `b`'s. */
export function throughputRatios(measured: Rounds, a = 0, b = 1): number[] {
  return measured.segments[a]!.map((m, r) => m.ok / m.seconds / (measured.segments[b]![r]!.ok / measured.segments[b]![r]!.seconds));
}

/** Per round, a latency percentile of side `a` ÷ the same of side `b`. */
export function latencyRatios(measured: Rounds, p: number, a = 0, b = 1): number[] {
  const at = (m: Measured) => percentile([...(m.latencies ?? [])].sort((x, y) => x - y), p);
  return measured.segments[a]!.map((m, r) => at(m) / at(measured.segments[b]![r]!));
}

/** A side driven by a load child; CPU is the `workerPid` process's when given, else the load child's own. */
export function loadSide(label: string, load: Load, command: Omit<SegmentCommand, 'cmd'>, workerPid?: number): Side {
  return {
    label,
    async segment() {
      if (!workerPid) return load.run(command);
      const { result, cpuSeconds } = await withCpu(workerPid, () => load.run(command));
      return { ...result, cpuSeconds };
    },
  };
}

export function requireClean(summary: Summary, what: string): void {
  const bad = summary.errors + summary.non2xx;
  if (summary.ok === 0 || bad > Math.max(5, 0.01 * (summary.ok + bad))) {
    throw new Error(`${what}: ${summary.ok} ok, ${summary.errors} errors, ${summary.non2xx} non-2xx${summary.firstError ? ` (${summary.firstError})` : ''}`);
  }
}

/** Starts load children, runs `fn`, and closes them whatever happens. */
export async function withLoads<T>(starts: (() => Promise<Load>)[], fn: (loads: Load[]) => Promise<T>): Promise<T> {
  const loads: Load[] = [];
  try {
    for (const start of starts) loads.push(await start());
    return await fn(loads);
  } finally {
    await Promise.all(loads.map((l) => l.close()));
  }
}

export const httpLoad = (spec: HttpLoadInput) => () => startLoad('load-http.ts', spec);

/**
 * A throughput figure from a pair of sides measured in `rounds`: side `a` ÷ side `b`,
 * the median of the pairs' ratios, CPU per operation of both.
 */
export function addThroughputFigure(
  input: Omit<FigureInput, 'value' | 'baseline' | 'ratios' | 'cpu' | 'loadAverage'> & { measured: Rounds; a?: number; b?: number; scale?: number },
): void {
  const { measured, a = 0, b = 1, scale = 1, ...rest } = input;
  const x = measured.summaries[a]!;
  const y = measured.summaries[b]!;
  addFigure({
    ...rest,
    value: x.rps * scale,
    baseline: y.rps * scale,
    ratios: throughputRatios(measured, a, b),
    cpu: { value: x.cpuMsPerOp, baseline: y.cpuMsPerOp },
    loadAverage: measured.loadAverage,
  });
}
