/** T2. the Temporal server restarted with 10 deliveries retrying */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant, sql } from '../database';
import { firstOnEachPath, sendToEachPath } from '../traffic';
import type { Scenario, TemporalStage } from '../scenario';

export const scenario: Scenario<TemporalStage> = {
  name: 'temporal-restarted',
  title: 'T2. the Temporal server restarted with 10 deliveries retrying',
  engine: 'temporal',
  async run(stage) {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `r${i}`);
    const receiver = await startHttpsReceiver({ tls: stage.tls, respond: firstOnEachPath(paths, 3, { status: 503 }) });
    const ids = await sendToEachPath(stage.service.url, key, receiver.url, paths);
    await receiver.waitForRequests(15, 30_000);
    await stage.restartTemporal();
    counts().faultsInjected++;
    const mid = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status <> 'delivered'`, [ids]);
    console.log(`  restarted with ${mid[0]?.n} of ${ids.length} deliveries unfinished, ${receiver.requests.length} requests received`);
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(
      ids.every((id) => settled.get(id)?.status === 'delivered' && settled.get(id)?.attempt_count === 4),
      'every delivery ended delivered on attempt 4, as scheduled before the restart',
    );
    await checkPerEvent('Temporal restarted while retrying', [receiver], settled);
    await receiver.close();
  },
};
