/** 2. SIGKILL in the middle of retries, then a restart */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant, sql } from '../database';
import { startService } from '../processes';
import { firstOnEachPath, sendToEachPath } from '../traffic';
import type { Scenario, Stage } from '../scenario';

export const scenario: Scenario<Stage> = {
  name: 'sigkill',
  title: '2. SIGKILL in the middle of retries, then a restart',
  engine: 'embedded',
  async run(stage) {
    const { key } = await newTenant();
    const paths = Array.from({ length: 20 }, (_, i) => `k${i}`);
    const receiver = await startHttpsReceiver({ tls: stage.tls, respond: firstOnEachPath(paths, 3, { status: 500 }) });
    let service = await startService(stage.env);
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    // Kill once the retries are under way: some deliveries have failed attempts behind them.
    await receiver.waitForRequests(25, 30_000);
    await service.stop('SIGKILL');
    counts().faultsInjected++;
    const mid = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status <> 'delivered'`, [ids]);
    console.log(`  killed with ${mid[0]?.n} of ${ids.length} deliveries unfinished, ${receiver.requests.length} requests received`);
    service = await startService(stage.env);
    const settled = await waitUntilSettled(ids, 90_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered after the restart');
    await service.stop();
    await checkPerEvent('SIGKILL', [receiver], settled, { allowUnsentInterrupted: true });
    await receiver.close();
  },
};
