import { randomUUID } from 'node:crypto';
import { openDatabase, WebhookEndpointSchema, type MikroORM, databaseAt } from '../../src/db';
import { createOrganization } from '../../src/auth';
import { DeliveryRecords, PendingDeliverySweeper, workflowIdFor, type DeliveryMeta, type DeliveryRef } from '../../src/delivery';
import { createLogger } from '../../src/config/logger';
import { createTestDatabase } from '../support/databases';

/**
 * An engine that records what it was asked to start, as the Temporal one would: the
 * deliveries in `existing` have a workflow already, `down` makes every start fail.
 */
class RecordingEngine {
  readonly started: { ref: DeliveryRef; meta: DeliveryMeta }[] = [];
  readonly seen = new Set<string>();
  constructor(
    readonly existing = new Set<string>(),
    public down = false,
  ) {}
  async startAwaited(ref: DeliveryRef, meta: DeliveryMeta): Promise<'started' | 'existed'> {
    this.started.push({ ref, meta });
    if (this.down) throw Object.assign(new Error('Temporal unreachable'), { code: 14 });
    this.seen.add(ref.deliveryId);
    return this.existing.has(ref.deliveryId) ? 'existed' : 'started';
  }
  hasWorkflow(ref: DeliveryRef): boolean {
    return this.seen.has(ref.deliveryId);
  }
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

  it('starts a backlog larger than a page in one pass, though the oldest rows have their workflows already', async () => {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Backlog', plan: 'scale' });
    const endpoint = em.create(WebhookEndpointSchema, {
      organizationId: org.id,
      url: 'https://hooks.example.com/in',
      description: '',
      eventNames: ['webhook.test'],
      secretKeyId: 'k',
      secretCiphertext: Buffer.alloc(16),
    });
    await em.flush();
    // 1,200 pending rows a second apart; the 1,000 oldest already have their workflow (a worker's backlog).
    const rows = await orm.em.fork().execute<{ id: string }[]>(
      `insert into webhook_deliveries (id, organization_id, endpoint_id, event_id, event_type, payload, status, attempt_count, workflow_id, created_at, updated_at)
       select gen_random_uuid(), ?, ?, 'evt_backlog_' || n, 'webhook.test', '{}', 'pending', 0, 'webhook-delivery/backlog/' || n, ?::timestamptz + n * interval '1 second', now()
         from generate_series(1, 1200) n
       returning id`,
      [org.id, endpoint.id, new Date(NOW - 3_600_000)],
    );
    const byAge = await orm.em.fork().execute<{ id: string }[]>('select id from webhook_deliveries where endpoint_id = ? order by created_at', [endpoint.id]);
    expect(byAge).toHaveLength(rows.length);
    const engine = new RecordingEngine(new Set(byAge.slice(0, 1000).map((r) => r.id)));
    const sweeper = new PendingDeliverySweeper({ orm, records: new DeliveryRecords({ now: () => NOW }), engine, logger: createLogger('silent'), intervalMs: 60_000, olderThanMs: 60_000, now: () => NOW });

    const swept = await sweeper.sweep();
    const ours = engine.started.filter((s) => s.ref.endpointId === endpoint.id);
    expect(swept).toBe(engine.started.length);
    expect(ours).toHaveLength(1200);
    expect(new Set(ours.map((s) => s.ref.deliveryId))).toEqual(new Set(byAge.map((r) => r.id)));
    // The next pass asks Temporal about none of them again: this process saw each one's workflow.
    engine.started.length = 0;
    expect(await sweeper.sweep()).toBe(0);
    expect(engine.started).toHaveLength(0);
    await sweeper.close();
  });

  it('stops a pass at the first start Temporal does not take', async () => {
    const em = orm.em.fork();
    const org = await createOrganization(em, { name: 'Down', plan: 'scale' });
    const endpoint = em.create(WebhookEndpointSchema, {
      organizationId: org.id,
      url: 'https://hooks.example.com/in',
      description: '',
      eventNames: ['webhook.test'],
      secretKeyId: 'k',
      secretCiphertext: Buffer.alloc(16),
    });
    await em.flush();
    for (let i = 0; i < 40; i++) await delivery(org.id, endpoint.id, 'pending', 120_000 + i);
    const engine = new RecordingEngine(new Set(), true);
    const sweeper = new PendingDeliverySweeper({ orm, records: new DeliveryRecords({ now: () => NOW }), engine, logger: createLogger('silent'), intervalMs: 60_000, olderThanMs: 60_000, now: () => NOW });

    await expect(sweeper.sweep()).rejects.toThrow('Temporal unreachable');
    // One try per start in flight, not one deadline per pending row.
    expect(engine.started.length).toBeLessThanOrEqual(16);
    await sweeper.close();
  });
});
