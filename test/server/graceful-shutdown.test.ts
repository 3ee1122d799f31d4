/**
 * SIGTERM with clients that open a connection per request (`Connection: close`): the service
 * (its real entry point, as a child process) takes itself out of readiness at once, keeps
 * accepting and serving through the drain, and only then stops accepting, so no call sent
 * before it stopped is reset. Every wait is on an explicit signal: the service's log lines,
 * answers, the child's exit.
 */
import http from 'node:http';
import path from 'node:path';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ConfigError, loadConfig } from '../../src/config';
import { openDatabase, databaseAt } from '../../src/db';
import { createOrganization, createUser, issueApiKey, PERMISSIONS } from '../../src/auth';
import { createTestDatabase } from '../support/databases';
import { TEST_ENV } from '../support/app';

const DRAIN_MS = 1_500;
const CLIENTS = 6;
/** Calls answered before the signal is sent: the clients are in full flow by then. */
const BEFORE_SIGNAL = 60;

interface LogLine {
  msg: string;
  time: number;
  [key: string]: unknown;
}

interface Call {
  path: string;
  startedAt: number;
  /** HTTP status, or the error code of a call that got no answer (ECONNRESET, ECONNREFUSED, ...). */
  outcome: number | string;
}

/** One request on a connection of its own, closed after the answer. */
function callOnce(url: string, route: string, apiKey?: string): Promise<Call> {
  const startedAt = Date.now();
  return new Promise((resolve) => {
    const req = http.get(`${url}${route}`, { agent: false, headers: { connection: 'close', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) } }, (res) => {
      res.resume();
      res.once('end', () => resolve({ path: route, startedAt, outcome: res.statusCode ?? 0 }));
      res.once('error', (error: NodeJS.ErrnoException) => resolve({ path: route, startedAt, outcome: error.code ?? error.message }));
    });
    req.once('error', (error: NodeJS.ErrnoException) => resolve({ path: route, startedAt, outcome: error.code ?? error.message }));
  });
}

let service: ChildProcessWithoutNullStreams;
let drop: () => Promise<void>;
afterAll(async () => {
  if (service && service.exitCode === null && service.signalCode === null) service.kill('SIGKILL');
  await drop?.();
});

it('on SIGTERM answers /readyz 503 at once, keeps accepting through the drain, and resets no call sent before it stopped accepting', async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  const orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 1 } });
  let apiKey: string;
  try {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Shutdown', plan: 'scale' });
    const user = await createUser(em, { organizationId: org.id, email: 'owner@example.com', role: 'owner' });
    apiKey = (await issueApiKey(em, { organizationId: org.id, userId: user.id, name: 'test', scopes: [...PERMISSIONS] })).key;
  } finally {
    await orm.close();
  }

  service = spawn(process.execPath, ['--import', 'tsx', path.resolve(__dirname, '../../src/server/main.ts')], {
    env: { ...process.env, ...TEST_ENV, DATABASE_URL: database.url, LOG_LEVEL: 'info', SHUTDOWN_DRAIN_MS: String(DRAIN_MS) },
  });
  let stderr = '';
  service.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => service.once('exit', (code) => resolve(code)));
  const lines: LogLine[] = [];
  const waiters: { msg: string; resolve: (line: LogLine) => void }[] = [];
  createInterface({ input: service.stdout }).on('line', (text) => {
    let line: LogLine;
    try {
      line = JSON.parse(text) as LogLine;
    } catch {
      return;
    }
    lines.push(line);
    for (const waiter of waiters.filter((w) => line.msg.startsWith(w.msg))) waiter.resolve(line);
  });
  const logged = (msg: string) =>
    new Promise<LogLine>((resolve, reject) => {
      const seen = lines.find((l) => l.msg.startsWith(msg));
      if (seen) return resolve(seen);
      waiters.push({ msg, resolve });
      void exited.then((code) => reject(new Error(`the service exited (${code}) before logging "${msg}": ${stderr}`)));
    });

  const url = (await logged('listening')).url as string;
  const calls: Call[] = [];
  const readiness: Call[] = [];
  let signalledAt = Infinity;
  let drainingSeen = false;
  let sawNotReady = false;
  let onAnswered: (() => void) | null = null;
  const flowing = new Promise<void>((resolve) => (onAnswered = () => calls.length >= BEFORE_SIGNAL && resolve()));
  // What a load balancer does: it stops sending once readiness says 503. Here the clients
  // also make one call each after the drain began, so calls are sent through the signal and
  // into the drain, and none near its end, when the listener stops accepting.
  const sentThroughTheDrain = () => sawNotReady && drainingSeen && calls.filter((c) => c.startedAt >= signalledAt).length >= CLIENTS;

  // Clients that open a connection per call.
  const clients = Array.from({ length: CLIENTS }, async (_, n) => {
    while (!sentThroughTheDrain()) {
      calls.push(await callOnce(url, n % 2 === 0 ? '/api/v1/webhooks' : '/healthz', apiKey));
      onAnswered?.();
    }
  });
  const poller = (async () => {
    while (!sawNotReady) {
      const call = await callOnce(url, '/readyz');
      readiness.push(call);
      sawNotReady = call.outcome === 503;
    }
  })();

  await flowing;
  signalledAt = Date.now();
  service.kill('SIGTERM');
  const draining = await logged('draining');
  drainingSeen = true;
  await Promise.all([...clients, poller]);
  const stopped = await logged('stopped accepting connections');
  // The listener is closed now: a new connection is refused, not reset.
  const after = await callOnce(url, '/healthz');
  expect(await exited).toBe(0);

  const failed = calls.filter((c) => c.outcome !== 200);
  expect(failed).toEqual([]);
  expect(calls.filter((c) => c.startedAt >= signalledAt).length).toBeGreaterThan(0);
  // Readiness answered 503 during the drain: before the listener stopped accepting.
  const firstNotReady = readiness.find((c) => c.outcome === 503)!;
  expect(firstNotReady.startedAt).toBeLessThan(stopped.time);
  expect(readiness.filter((c) => c.outcome !== 200 && c.outcome !== 503)).toEqual([]);
  expect(draining.drainMs).toBe(DRAIN_MS);
  expect(stopped.time - draining.time).toBeGreaterThanOrEqual(DRAIN_MS);
  expect(after.outcome).toBe('ECONNREFUSED');
  expect(lines.map((l) => l.msg)).toContain('stopped');
}, 120_000);

describe('SHUTDOWN_DRAIN_MS', () => {
  const problemOf = (value: string | undefined): string => {
    try {
      loadConfig({ NODE_ENV: 'test', SHUTDOWN_DRAIN_MS: value });
      return '';
    } catch (error) {
      if (error instanceof ConfigError) return error.message;
      throw error;
    }
  };

  it('defaults to 5 s and takes 0 (no drain) up to 60 s', () => {
    expect(loadConfig({ NODE_ENV: 'test' }).shutdownDrainMs).toBe(5_000);
    expect(loadConfig({ NODE_ENV: 'test', SHUTDOWN_DRAIN_MS: '0' }).shutdownDrainMs).toBe(0);
    expect(loadConfig({ NODE_ENV: 'test', SHUTDOWN_DRAIN_MS: '60000' }).shutdownDrainMs).toBe(60_000);
  });

  it.each(['-1', '1.5', 'five', '60001'])('refuses %s at start, saying what it takes', (value) => {
    expect(problemOf(value)).toContain(`SHUTDOWN_DRAIN_MS must be an integer from 0 to 60000 (got "${value}")`);
  });
});
