/** 1. receiver faults, each once, then 200 */
import { startHttpsReceiver, type ReceiverAction } from '../../../test/support/https-receiver';
import { check, checkPerEvent, counts, tally, waitUntilSettled } from '../checks';
import { newTenant, sql } from '../database';
import { startService } from '../processes';
import { createEndpointAndSend, notTls, scripted } from '../traffic';
import type { Scenario, Stage } from '../scenario';

export const scenario: Scenario<Stage> = {
  name: 'receiver-faults',
  title: '1. receiver faults, each once, then 200',
  engine: 'embedded',
  async run(stage) {
    const { key } = await newTenant();
    const faults: Record<string, ReceiverAction> = {
      status500: { status: 500 },
      timeout: 'hang',
      reset: 'reset',
      drip: { drip: { bytes: 1000, intervalMs: 200 } },
      redirect: { status: 302, headers: { location: 'https://127.0.0.1:1/elsewhere' } },
    };
    const receiver = await startHttpsReceiver({
      tls: stage.tls,
      respond: scripted(Object.fromEntries(Object.entries(faults).map(([name, action]) => [name, (n: number) => (n === 0 ? action : { status: 200 })]))),
    });
    const broken = await notTls();
    const service = await startService(stage.env);
    const sent = new Map<string, string>();
    for (const name of Object.keys(faults)) sent.set(name, (await createEndpointAndSend(service.url, key, `${receiver.url}/${name}`)).deliveryId);
    sent.set('tls', (await createEndpointAndSend(service.url, key, `${broken.url}/tls`)).deliveryId);
    counts().faultsInjected += sent.size;
    const settled = await waitUntilSettled([...sent.values()], 60_000);
    tally([...sent.values()], settled);
    for (const [name, id] of sent) {
      const row = settled.get(id);
      if (name === 'tls') {
        check(row?.status === 'dead_lettered' && row.attempt_count === 8, `TLS failure on every attempt → dead-lettered after 8 (got ${row?.status}/${row?.attempt_count})`);
      } else {
        check(
          row?.status === 'delivered' && row.attempt_count === 2,
          `${name} once → delivered on attempt 2 (got ${row?.status}/${row?.attempt_count}${row?.last_error ? `, last error: ${row.last_error}` : ''})`,
        );
      }
    }
    await service.stop();
    await checkPerEvent('receiver faults', [receiver], new Map([...settled].filter(([id]) => id !== sent.get('tls'))));
    const tlsAttempts = await sql<{ n: number }>('select count(*)::int as n from delivery_attempts where delivery_id = $1 and dispatched_at is null', [sent.get('tls')]);
    check(tlsAttempts[0]?.n === 8, `TLS failures count as attempts that never reached the receiver (${tlsAttempts[0]?.n} of 8 unsent)`);
    await receiver.close();
    await broken.close();
  },
};
