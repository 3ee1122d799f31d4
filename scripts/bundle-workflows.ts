/**
 * `npm run worker:bundle`: builds the delivery workflow code into one bundle ahead of time,
 * so a worker loads it at start (WORKER_WORKFLOW_BUNDLE) instead of bundling it with webpack
 * on every start. Build it with the release, from the same commit as the worker runs: a
 * bundle of other workflow code would replay running deliveries through that code.
 *
 *   tsx scripts/bundle-workflows.ts [--traced] [out]    default: dist/workflow-bundle.js
 *
 * `--traced` adds the OpenTelemetry workflow interceptors, for workers run with tracing on
 * (README, "Tracing"); a worker with tracing off must be given a bundle without them.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { WORKFLOW_TRACING_MODULES } from '../src/tracing';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const traced = args.includes('--traced');
  const out = path.resolve(args.find((arg) => !arg.startsWith('--')) ?? path.join(__dirname, '..', 'dist', 'workflow-bundle.js'));
  const started = Date.now();
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    workflowInterceptorModules: traced ? [...WORKFLOW_TRACING_MODULES] : [],
    logger: new DefaultLogger('WARN'),
  });
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(`${out}.${process.pid}`, code);
  renameSync(`${out}.${process.pid}`, out);
  process.stdout.write(`workflow bundle: ${out} (${Math.round(code.length / 1024)} KiB, ${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bundle-workflows: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
