/** T4. Temporal down while the API takes 5 test calls and 2 publishes to 3 endpoints, then up again */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant, sql } from '../database';
import { api, publish } from '../traffic';
import type { Scenario, TemporalStage } from '../scenario';

export const scenario: Scenario<TemporalStage> = {
  name: 'temporal-down',
  title: 'T4. Temporal down while the API takes 5 test calls and 2 publishes to 3 endpoints, then up again',
  engine: 'temporal',
  async run(stage) {
    const { org, key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls: stage.tls });
    const endpointIds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const created = await api(stage.service.url, key, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/d${i}`, eventNames: ['post.held'] });
      if (created.status !== 200) throw new Error(`create webhook: ${created.status} ${JSON.stringify(created.body)}`);
      endpointIds.push(created.body.endpoint.id as string);
    }
    await stage.stopTemporal();
    counts().faultsInjected++;
    const tests = await Promise.all(Array.from({ length: 5 }, (_, i) => api(stage.service.url, key, 'POST', `/api/v1/webhooks/${endpointIds[i % 3]}/test`)));
    const published = await Promise.all(['down-1', 'down-2'].map((eventId) => publish(stage.service.url, org.id, `${eventId}-${org.id}`)));
    check(
      tests.every((r) => r.status === 200) && published.every((r) => r.status === 200 && r.deliveryIds.length === 3),
      `every call accepted while Temporal was down (test calls ${tests.map((r) => r.status).join(' ')}, publishes ${published.map((r) => `${r.status}/${r.deliveryIds.length}`).join(' ')})`,
    );
    const ids = [...tests.map((r) => r.body?.delivery?.id as string), ...published.flatMap((r) => r.deliveryIds)].filter(Boolean);
    const pending = await sql<{ n: number }>(`select count(*)::int as n from webhook_deliveries where id = any($1) and status = 'pending'`, [ids]);
    check(pending[0]?.n === 11, `all 11 deliveries recorded as pending while Temporal was down (${pending[0]?.n})`);
    check(receiver.requests.length === 0, `nothing sent while Temporal was down (${receiver.requests.length} requests)`);
    await stage.startTemporal();
    const started = Date.now();
    const settled = await waitUntilSettled(ids, 120_000);
    console.log(`  Temporal up again: all settled ${Math.round((Date.now() - started) / 1000)} s later`);
    tally(ids, settled);
    check(ids.length === 11 && ids.every((id) => settled.get(id)?.status === 'delivered'), 'the pending sweep started every one, and every one ended delivered');
    await checkPerEvent('Temporal down while accepting calls', [receiver], settled);
    await receiver.close();
  },
};
