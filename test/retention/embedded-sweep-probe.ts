/**
 * Run by embedded-sweep.test.ts in its own process (PGlite loads its WebAssembly through a
 * dynamic import that jest's module sandbox cannot run), with no PostgreSQL answering:
 *
 *   <dataDir> <port>   resolves the development database as `npm start` does (embedded PGlite,
 *                      owned), migrates it, records deliveries of two organizations, ages some
 *                      with SQL, runs one retention pass and one erasure over the service's pool,
 *                      and prints one JSON line: what they removed and the rows as stored.
 */
import pino from 'pino';
import { migrateAs, openDatabase, resolveDatabaseUrl } from '../../src/db';
import { createOrganization } from '../../src/auth';
import { DeliveryRecords } from '../../src/delivery';
import { eraseDeliveryData, RetentionSweep } from '../../src/retention';
import { RETENTION_BY_PLAN } from '../../src/endpoints';
import { endpoint, recordDelivery } from '../support/deliveries';

const DAY = 24 * 60 * 60 * 1000;

async function main(): Promise<void> {
  const [dataDir, port] = process.argv.slice(2);
  const logger = pino({ level: 'silent' });
  const database = await resolveDatabaseUrl('', logger, { dataDir, local: { host: '127.0.0.1', port: Number(port) }, embedded: 'own' });
  try {
    await migrateAs(database);
    const orm = await openDatabase(database);
    try {
      const records = new DeliveryRecords();
      const sql = <T>(text: string, params: unknown[] = []) => orm.em.fork().execute<T[]>(text, params);
      const org = (await createOrganization(orm.em.fork(), { name: 'Embedded retention', plan: 'scale' })).id;
      const other = (await createOrganization(orm.em.fork(), { name: 'Embedded erasure', plan: 'scale' })).id;
      const [mine, theirs] = [await endpoint(orm, org), await endpoint(orm, other)];
      const aged = async (organizationId: string, endpointId: string, ageDays: number) => {
        const { deliveryId } = await recordDelivery(orm, records, organizationId, endpointId);
        const at = new Date(Date.now() - ageDays * DAY);
        await sql(`update webhook_deliveries set status = 'delivered', attempt_count = 1, created_at = ?, next_attempt_at = null where id = ?`, [at, deliveryId]);
        await sql(
          `insert into delivery_attempts (delivery_id, series, attempt, started_at, dispatched_at, finished_at, response_status, response_excerpt) values (?, 1, 1, ?, ?, ?, 200, 'the answer')`,
          [deliveryId, at, at, at],
        );
        return deliveryId;
      };
      const { payloadDays, attemptDays } = RETENTION_BY_PLAN.scale;
      const expired = [await aged(org, mine.id, payloadDays + 1), await aged(org, mine.id, payloadDays + 2), await aged(org, mine.id, attemptDays + 1)];
      const kept = await aged(org, mine.id, payloadDays - 1);
      const erased = [await aged(other, theirs.id, 1), await aged(other, theirs.id, 2)];

      const sweep = new RetentionSweep({ orm, records, logger, now: Date.now, intervalMs: 60_000, batchSize: 2, pauseMs: 0 });
      const pass = await sweep.sweep();
      await sweep.stop();
      const erasure = await eraseDeliveryData(orm.em.fork(), records, { organizationId: other }, false, new Date());
      const stored = await sql<{ id: string; payload: string; payload_removed: string | null; status: string; attempts: number; excerpts: number }>(
        `select d.id, d.payload, d.payload_removed, d.status,
                (select count(*)::int from delivery_attempts a where a.delivery_id = d.id) as attempts,
                (select count(a.response_excerpt)::int from delivery_attempts a where a.delivery_id = d.id) as excerpts
           from webhook_deliveries d where d.organization_id in (?, ?)`,
        [org, other],
      );
      process.stdout.write(`${JSON.stringify({ pass, erasure, expired, kept, erased, stored })}\n`);
    } finally {
      await orm.close();
    }
  } finally {
    await database.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(String(error instanceof Error ? error.stack : error));
  process.exitCode = 1;
});
