/** 4. two instances, 1,000 concurrent test calls */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant, sql } from '../database';
import { startService } from '../processes';
import { api } from '../traffic';
import type { Scenario, Stage } from '../scenario';

export const scenario: Scenario<Stage> = {
  name: 'two-instances',
  title: '4. two instances, 1,000 concurrent test calls',
  engine: 'embedded',
  async run(stage) {
    const { org, key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls: stage.tls });
    // A loaded machine may take longer than 1 s per attempt; a timed-out attempt that arrived is still counted right.
    const loaded = { ...stage.env, DELIVERY_ATTEMPT_TIMEOUT_MS: '10000' };
    const [a, b] = await Promise.all([startService(loaded), startService(loaded)]);
    const created = await api(a!.url, key, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/two` });
    const endpointId = created.body.endpoint.id as string;
    const answers = await Promise.all(
      Array.from({ length: 1000 }, (_, i) => api(i % 2 ? a!.url : b!.url, key, 'POST', `/api/v1/webhooks/${endpointId}/test`)),
    );
    counts().faultsInjected++;
    const accepted = answers.filter((r) => r.status === 200);
    const limited = answers.filter((r) => r.status === 429).length;
    const others = answers.filter((r) => r.status !== 200 && r.status !== 429).map((r) => `${r.status} ${r.body?.code ?? ''}`.trim());
    check(
      accepted.length === 300 && limited === 700,
      `exactly 300 accepted and 700 rate-limited (got ${accepted.length} and ${limited}${others.length ? `; other answers: ${[...new Set(others)].map((o) => `${others.filter((x) => x === o).length}× ${o}`).join(', ')}` : ''})`,
    );
    const rows = await sql<{ id: string }>('select id from webhook_deliveries where endpoint_id = $1', [endpointId]);
    check(rows.length === accepted.length, `one delivery recorded per accepted call (${rows.length})`);
    const acceptedIds = new Set(accepted.map((r) => r.body.delivery.id as string));
    check(rows.every((r) => acceptedIds.has(r.id)), 'every recorded delivery is one an accepted call returned');
    const settled = await waitUntilSettled(rows.map((r) => r.id), 120_000);
    const usage = await sql<{ deliveries: string }>('select deliveries from delivery_usage where organization_id = $1', [org.id]);
    check(Number(usage[0]?.deliveries) === 300, `the quota counted exactly 300 (got ${usage[0]?.deliveries})`);
    tally(rows.map((r) => r.id), settled);
    check([...settled.values()].every((r) => r.status === 'delivered'), 'every accepted event was delivered');
    await Promise.all([a!.stop(), b!.stop()]);
    await checkPerEvent('two instances', [receiver], settled);
    await receiver.close();
  },
};
