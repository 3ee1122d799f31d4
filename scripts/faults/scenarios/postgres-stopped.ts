/** 3a. PostgreSQL stopped while a receiver holds 16 requests for 3 s */
import { startHttpsReceiver } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant } from '../database';
import { startService } from '../processes';
import { createEndpointAndSend } from '../traffic';
import type { Scenario, Stage } from '../scenario';

export const scenario: Scenario<Stage> = {
  name: 'postgres-stopped',
  title: '3a. PostgreSQL stopped while a receiver holds 16 requests for 3 s',
  engine: 'embedded',
  async run(stage) {
    const { key } = await newTenant();
    const receiver = await startHttpsReceiver({ tls: stage.tls, respond: () => ({ status: 200, delayMs: 3_000 }) });
    const service = await startService({ ...stage.env, DELIVERY_ATTEMPT_TIMEOUT_MS: '10000' });
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) ids.push((await createEndpointAndSend(service.url, key, `${receiver.url}/h${i}`)).deliveryId);
    await receiver.waitForRequests(16, 30_000);
    stage.cluster.stop();
    counts().faultsInjected++;
    // The answers come while PostgreSQL is down: each outcome must be kept until it can be recorded.
    const answered = Date.now() + 30_000;
    while (receiver.requests.some((r) => r.answered === undefined) && Date.now() < answered) await new Promise((r) => setTimeout(r, 100));
    check(receiver.requests.every((r) => r.answered === 200), 'the receiver answered all 16 while PostgreSQL was down');
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await stage.cluster.start();
    const settled = await waitUntilSettled(ids, 60_000);
    tally(ids, settled);
    check(ids.every((id) => settled.get(id)?.status === 'delivered' && settled.get(id)?.attempt_count === 1), 'every delivery ended delivered on attempt 1');
    check(receiver.requests.length === 16, `each event arrived exactly once (${receiver.requests.length} requests for 16 events)`);
    await checkPerEvent('PostgreSQL stopped mid-request', [receiver], settled);
    const ready = await fetch(`${service.url}/readyz`);
    check(ready.status === 200, `the same service process is ready again (/readyz ${ready.status})`);
    await service.stop();
    await receiver.close();
  },
};
