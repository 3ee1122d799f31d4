import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';

/**
 * Histories the current workflow code wrote on a real Temporal server, kept as replay
 * fixtures (workflow-replay.test.ts replays every one): a change to deliverWebhook that
 * running deliveries could not replay fails the suite. The live suites write them again
 * when RECORD_TEMPORAL_HISTORIES=1 (docs/changing-the-workflow.md says when to).
 */
export const RECORDED_HISTORIES_DIR = path.join(__dirname, 'histories', 'recorded');

export async function recordHistory(handle: WorkflowHandle, name: string): Promise<void> {
  if (process.env.RECORD_TEMPORAL_HISTORIES !== '1') return;
  const history = await handle.fetchHistory();
  await mkdir(RECORDED_HISTORIES_DIR, { recursive: true });
  await writeFile(path.join(RECORDED_HISTORIES_DIR, `${name}.json`), `${JSON.stringify(JSON.parse(historyToJSON(history)), null, 2)}\n`);
}

/** Every recorded history, by file name (read at once: jest names the cases before it runs them). */
export function recordedHistories(): { name: string; history: { events: Array<Record<string, any>> } }[] {
  const names = readdirSync(RECORDED_HISTORIES_DIR).filter((name) => name.endsWith('.json')).sort();
  return names.map((name) => ({ name, history: JSON.parse(readFileSync(path.join(RECORDED_HISTORIES_DIR, name), 'utf8')) as { events: Array<Record<string, any>> } }));
}
