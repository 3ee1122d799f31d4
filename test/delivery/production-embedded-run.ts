/**
 * Run inside a network namespace of its own, where nothing answers on 127.0.0.1:5432 (see
 * production-embedded.test.ts): the README's production path on one machine, as a user
 * runs it, on the embedded database. A copy of this checkout without .data/ or dist/ runs
 * `npm run start:temporal` (Temporal's development server, the API owning the embedded
 * database, the worker joining it); the admin CLI bootstraps a key; two endpoints on a
 * real HTTPS receiver subscribe to one event type; 50 publishes go at once. Prints one
 * JSON report on stdout once every delivery row is final; everything it started is stopped
 * on the way out, also on failure.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { verifyWebhook } from '../../src/signatures';
import { freePort } from '../../scripts/temporal-server';
import { makeTestTls } from '../support/tls';
import { startHttpsReceiver } from '../support/https-receiver';

const ROOT = path.resolve(__dirname, '../..');
const PUBLISHES = 50;
const LEFT_OUT = new Set(['node_modules', '.tools', '.data', 'dist', '.git', 'coverage']);
const FINAL = new Set(['delivered', 'failed', 'dead_lettered']);

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, stack?: ChildProcess): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (stack && stack.exitCode !== null) throw new Error(`start:temporal exited (${stack.exitCode}) while waiting for ${what}`);
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(250);
  }
}

async function main(): Promise<void> {
  const work = mkdtempSync(path.join(tmpdir(), 'production-embedded-'));
  const checkout = path.join(work, 'checkout');
  for (const entry of readdirSync(ROOT)) {
    if (!LEFT_OUT.has(entry)) cpSync(path.join(ROOT, entry), path.join(checkout, entry), { recursive: true, preserveTimestamps: true });
  }
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(checkout, 'node_modules'));
  symlinkSync(path.join(ROOT, '.tools'), path.join(checkout, '.tools'));

  const tls = await makeTestTls();
  const receiver = await startHttpsReceiver({ tls, respond: () => ({ status: 200 }) });
  const token = randomBytes(24).toString('hex');
  const [port, temporalPort, uiPort, workerPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'development',
    PORT: String(port),
    TEMPORAL_PORT: String(temporalPort),
    TEMPORAL_UI_PORT: String(uiPort),
    WORKER_METRICS_PORT: String(workerPort),
    DELIVERY_EXTRA_CA_PEM: tls.caPem,
    DELIVERY_ALLOW_CIDRS: '127.0.0.0/8',
    INTERNAL_SERVICE_TOKENS: `scheduler:${token}`,
    LOG_LEVEL: 'warn',
  };
  delete env.DATABASE_URL;
  delete env.DATABASE_MIGRATION_URL;
  // Copied with their times, so the wrapper finds the generated code current and does not regenerate it.
  // A process group of its own, so that the stack goes whole whatever happens here.
  const stack = spawn('npm', ['run', '--silent', 'start:temporal'], { cwd: checkout, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  stack.stdout!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  stack.stderr!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  try {
    const api = `http://127.0.0.1:${port}`;
    await until('the API', 240_000, async () => ((await fetch(`${api}/readyz`)).ok ? true : undefined), stack);
    await until('the worker', 240_000, async () => ((await fetch(`http://127.0.0.1:${workerPort}/readyz`)).ok ? true : undefined), stack);

    const { stdout } = await promisify(execFile)('npm', ['run', '--silent', 'admin', '--', 'bootstrap', '--json'], { cwd: checkout, env });
    const { apiKey, organizationId } = JSON.parse(stdout.trim().split('\n').at(-1)!) as { apiKey: string; organizationId: string };
    const call = async (method: string, route: string, body: unknown, bearer = apiKey) => {
      const response = await fetch(`${api}${route}`, {
        method,
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as Record<string, any> };
    };
    const endpoints: { id: string; path: string; secret: string }[] = [];
    for (const name of ['a', 'b']) {
      const created = await call('POST', '/api/v1/webhooks', { url: `${receiver.url}/${name}`, eventNames: ['order.shipped'] });
      if (created.status !== 200) throw new Error(`creating endpoint ${name} answered ${created.status}: ${JSON.stringify(created.body)}`);
      endpoints.push({ id: created.body.endpoint.id, path: `/${name}`, secret: created.body.signingSecret });
    }

    const publishes = await Promise.all(
      Array.from({ length: PUBLISHES }, (_, i) =>
        call('POST', '/publishing.internal.v1.EventService/PublishEvent', { organizationId, eventId: `order-${i}`, eventType: 'order.shipped', payload: { order: i } }, token),
      ),
    );

    const rows = await until('every delivery row to be final', 300_000, async () => {
      const all = [];
      for (const endpoint of endpoints) {
        const page = await call('GET', `/api/v1/webhooks/${endpoint.id}/deliveries?pageSize=100`, undefined);
        all.push(...((page.body.deliveries ?? []) as Record<string, any>[]).map((d) => ({ endpointId: endpoint.id, status: d.status as string, attempts: d.attemptCount ?? 0, lastError: d.lastError ?? '' })));
      }
      return all.length === PUBLISHES * endpoints.length && all.every((d) => FINAL.has(d.status)) ? all : undefined;
    }, stack);

    const received = receiver.requests.map((request) => {
      const endpoint = endpoints.find((e) => e.path === request.path);
      let signed = true;
      try {
        verifyWebhook(endpoint?.secret ?? '', request.headers, request.rawBody);
      } catch {
        signed = false;
      }
      return { path: request.path, eventId: (JSON.parse(request.rawBody) as { id: string }).id, signed };
    });
    process.stdout.write(`${JSON.stringify({ publishes: publishes.map((p) => p.status), rows, received })}\n`);
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n--- start:temporal (last 4000 characters)\n${log.slice(-4000)}\n`);
    process.exitCode = 1;
  } finally {
    try {
      process.kill(-stack.pid!, 'SIGTERM');
    } catch {
      // Gone already.
    }
    const exited = stack.exitCode !== null || (await Promise.race([new Promise((resolve) => stack.once('exit', () => resolve(true))), sleep(30_000).then(() => false)]));
    if (!exited) process.kill(-stack.pid!, 'SIGKILL');
    await receiver.close();
    rmSync(work, { recursive: true, force: true });
  }
}

void main();
