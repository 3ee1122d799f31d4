/**
 * `npm run start:temporal`: the production delivery path on one machine. Temporal's
 * development server (built into .tools/ when missing, its workflows kept in
 * .data/temporal.sqlite), the API with TEMPORAL_ADDRESS set, and the delivery worker, each
 * as its own process, as in production; the database is the one `npm start` picks.
 * Ctrl-C stops all three; so does any one of them exiting.
 *
 * Ports: TEMPORAL_PORT (7233), TEMPORAL_UI_PORT (8233), PORT (8080), WORKER_METRICS_PORT (9464).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTemporalDevServer } from './temporal-server';
import { serviceNodeFlags } from './service-node-flags';

const root = path.resolve(__dirname, '..');

async function untilAnswers(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${url} never answered: its process exited (${child.exitCode})`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // Not listening yet.
    }
    await sleep(250);
  }
  throw new Error(`${url} did not answer within ${timeoutMs / 1000} s`);
}

async function main(): Promise<void> {
  const data = path.join(root, '.data');
  mkdirSync(data, { recursive: true });
  const server = await startTemporalDevServer({
    dbFile: path.join(data, 'temporal.sqlite'),
    port: Number(process.env.TEMPORAL_PORT ?? 7233),
    uiPort: Number(process.env.TEMPORAL_UI_PORT ?? 8233),
    logFile: path.join(data, 'temporal.log'),
  });
  const env = {
    ...process.env,
    TEMPORAL_ADDRESS: server.address,
    TEMPORAL_NAMESPACE: server.namespace,
    TEMPORAL_SEARCH_ATTRIBUTES: 'true',
    TEMPORAL_UI_URL: server.uiUrl ?? '',
  };
  const children: ChildProcess[] = [];
  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    // The worker first, so no attempt starts against an API or server that is going away.
    for (const child of [...children].reverse()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    await server.stop();
    process.exit(code);
  };
  process.once('SIGINT', () => void stop(0));
  process.once('SIGTERM', () => void stop(0));

  const run = (name: string, entry: string) => {
    const child = spawn('tsx', [...serviceNodeFlags(root), entry], { cwd: root, env, stdio: 'inherit' });
    child.once('exit', (code) => {
      if (!stopping) {
        process.stderr.write(`start:temporal: the ${name} exited (${code ?? 'signal'}); stopping the others\n`);
        void stop(1);
      }
    });
    children.push(child);
    return child;
  };

  const api = run('API', 'src/server/main.ts');
  const port = process.env.PORT ?? '8080';
  await untilAnswers(`http://127.0.0.1:${port}/healthz`, api, 120_000);
  // After the API: with no PostgreSQL the API owns the embedded database, which the worker joins.
  run('worker', 'src/delivery/worker-main.ts');
  process.stdout.write(
    [
      '',
      'Production delivery path running:',
      `  API          http://localhost:${port}  (deliveries run on Temporal at ${server.address})`,
      `  Temporal UI  ${server.uiUrl}/namespaces/${server.namespace}/workflows`,
      `  worker       metrics on http://localhost:${process.env.WORKER_METRICS_PORT ?? '9464'}/metrics`,
      `  operator CLI TEMPORAL_UI_URL=${server.uiUrl} npm run operator -- delivery <id>  (prints the workflow's UI link)`,
      'Ctrl-C stops all three.',
      '',
    ].join('\n'),
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`start:temporal: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
