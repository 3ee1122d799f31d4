/** 3b. PostgreSQL restarted with 20 deliveries retrying */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant } from '../database';
import { startService } from '../processes';
import { api, firstOnEachPath, sendToEachPath } from '../traffic';
import type { Scenario, Stage } from '../scenario';

export const scenario: Scenario<Stage> = {
  name: 'postgres-restarted',
  title: '3b. PostgreSQL restarted with 20 deliveries retrying',
  engine: 'embedded',
  async run(stage) {
    const { key } = await newTenant();
    const paths = Array.from({ length: 20 }, (_, i) => `p${i}`);
    const receiver = await startHttpsReceiver({
      tls: stage.tls,
      // Four failures 300 ms apart keep every delivery retrying while PostgreSQL restarts.
      respond: firstOnEachPath(paths, 4, { status: 503 }),
    });
    const service = await startService(stage.env);
    const ids = await sendToEachPath(service.url, key, receiver.url, paths);
    stage.cluster.stop();
    await stage.cluster.start();
    counts().faultsInjected++;
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered');
    await checkPerEvent('PostgreSQL restarted while retrying', [receiver], settled);
    const list = await api(service.url, key, 'GET', '/api/v1/webhooks');
    check(list.status === 200, `the same service process answers the API (${list.status})`);
    await service.stop();
    await receiver.close();
  },
};
