/** T1. the worker killed with SIGKILL while a receiver holds 10 attempts for 3 s, then a new worker */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant } from '../database';
import { startWorker } from '../processes';
import { firstOnEachPath, sendToEachPath } from '../traffic';
import type { Scenario, TemporalStage } from '../scenario';

export const scenario: Scenario<TemporalStage> = {
  name: 'worker-killed',
  title: 'T1. the worker killed with SIGKILL while a receiver holds 10 attempts for 3 s, then a new worker',
  engine: 'temporal',
  async run(stage) {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `w${i}`);
    const receiver = await startHttpsReceiver({ tls: stage.tls, respond: firstOnEachPath(paths, 1, { status: 200, delayMs: 3_000 }) });
    const ids = await sendToEachPath(stage.service.url, key, receiver.url, paths);
    await receiver.waitForRequests(paths.length, 30_000);
    await stage.worker.stop('SIGKILL');
    counts().faultsInjected++;
    const inFlight = receiver.requests.filter((r) => r.answered === undefined).length;
    const started = Date.now();
    stage.worker = await startWorker(stage.env);
    // Temporal retries an attempt whose worker died once its heartbeat timeout (15 s) passes.
    const settled = await waitUntilSettled(ids, 120_000);
    console.log(`  killed with ${inFlight} attempts unanswered at the receiver; all settled ${Math.round((Date.now() - started) / 1000)} s later`);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered after a new worker took over');
    await checkPerEvent('worker SIGKILL', [receiver], settled, { allowUnsentInterrupted: true });
    await receiver.close();
  },
};
