/**
 * `npm run worker:bundle`: builds the delivery workflow code into one bundle ahead of time,
 * so a worker loads it at start (WORKER_WORKFLOW_BUNDLE) instead of bundling it with webpack
 * on every start. Build it with the release, from the same commit as the worker runs: a
 * bundle of other workflow code would replay running deliveries through that code.
 *
 *   tsx scripts/bundle-workflows.ts [out]    default: dist/workflow-bundle.js
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';

async function main(): Promise<void> {
  const out = path.resolve(process.argv[2] ?? path.join(__dirname, '..', 'dist', 'workflow-bundle.js'));
  const started = Date.now();
  const { code } = await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: new DefaultLogger('WARN') });
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(`${out}.${process.pid}`, code);
  renameSync(`${out}.${process.pid}`, out);
  process.stdout.write(`workflow bundle: ${out} (${Math.round(code.length / 1024)} KiB, ${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bundle-workflows: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
