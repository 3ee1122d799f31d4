/** T3. PostgreSQL restarted with 10 deliveries retrying on Temporal */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant } from '../database';
import { firstOnEachPath, sendToEachPath } from '../traffic';
import type { Scenario, TemporalStage } from '../scenario';

export const scenario: Scenario<TemporalStage> = {
  name: 'temporal-postgres-restarted',
  title: 'T3. PostgreSQL restarted with 10 deliveries retrying on Temporal',
  engine: 'temporal',
  async run(stage) {
    const { key } = await newTenant();
    const paths = Array.from({ length: 10 }, (_, i) => `q${i}`);
    const receiver = await startHttpsReceiver({ tls: stage.tls, respond: firstOnEachPath(paths, 4, { status: 503 }) });
    const ids = await sendToEachPath(stage.service.url, key, receiver.url, paths);
    await receiver.waitForRequests(10, 30_000);
    stage.cluster.stop();
    await stage.cluster.start();
    counts().faultsInjected++;
    const settled = await waitUntilSettled(ids, 120_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered'), 'every delivery ended delivered');
    await checkPerEvent('PostgreSQL restarted under Temporal', [receiver], settled);
    await receiver.close();
  },
};
