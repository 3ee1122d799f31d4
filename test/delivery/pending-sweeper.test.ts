import { randomUUID } from 'node:crypto';
import { openDatabase, WebhookEndpointSchema, type MikroORM, databaseAt } from '../../src/db';
import { createOrganization } from '../../src/auth';
import { DeliveryRecords, PendingDeliverySweeper, workflowIdFor, type DeliveryEngine, type DeliveryMeta, type DeliveryRef } from '../../src/delivery';
import { createLogger } from '../../src/config/logger';
import { createTestDatabase } from '../support/databases';

/** An engine that records what it was asked to start, as the Temporal one would. */
class RecordingEngine implements DeliveryEngine {
  readonly started: { ref: DeliveryRef; meta: DeliveryMeta }[] = [];
  async start(ref: DeliveryRef, meta: DeliveryMeta) {
    this.started.push({ ref, meta });
    return { workflowId: workflowIdFor(ref) };
  }
  async release() {}
  async close() {}
}

let orm: MikroORM;
let drop: () => Promise<void>;
const NOW = Date.parse('2026-11-21T12:00:00Z');

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  orm = await openDatabase(databaseAt(database.url), { pool: { min: 0, max: 2 } });
});
afterAll(async () => {
  await orm.close();
  await drop();
});

async function delivery(organizationId: string, endpointId: string, status: string, ageMs: number): Promise<string> {
  const eventId = `evt_${randomUUID()}`;
  const at = new Date(NOW - ageMs);
  const [row] = await orm.em.fork().execute<{ id: string }[]>(
    `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, created_at, updated_at)
     values (gen_random_uuid(), ?, ?, ?, 'webhook.test', '{}', ?, 0, ?, ?, ?) returning id`,
    [organizationId, endpointId, eventId, status, workflowIdFor({ organizationId, endpointId, eventId }), at, at],
  );
  return row!.id;
}

describe('the pending-delivery sweep (Temporal engine)', () => {
  it('starts again every delivery still pending after the threshold, and nothing else', async () => {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Sweep', plan: 'scale' });
    const endpoint = em.create(WebhookEndpointSchema, {
      organizationId: org.id,
      url: 'https://hooks.example.com/in?token=secret',
      description: '',
      eventNames: ['webhook.test'],
      secretKeyId: 'k',
      secretCiphertext: Buffer.alloc(16),
    });
    await em.flush();
    const stranded = await delivery(org.id, endpoint.id, 'pending', 120_000);
    await delivery(org.id, endpoint.id, 'pending', 5_000);
    await delivery(org.id, endpoint.id, 'retrying', 120_000);
    await delivery(org.id, endpoint.id, 'delivered', 120_000);

    const engine = new RecordingEngine();
    const sweeper = new PendingDeliverySweeper({ orm, records: new DeliveryRecords({ now: () => NOW }), engine, logger: createLogger('silent'), intervalMs: 60_000, olderThanMs: 60_000, now: () => NOW });
    expect(await sweeper.sweep()).toBe(1);
    expect(engine.started).toEqual([
      {
        ref: expect.objectContaining({ deliveryId: stranded, organizationId: org.id, endpointId: endpoint.id }),
        meta: { eventType: 'webhook.test', targetHost: 'hooks.example.com' },
      },
    ]);
    await sweeper.close();
  });
});
