/**
 * Figure 8: deliveries recorded per second by PublishEvent to an organization with 100
 * subscribed endpoints, ÷ a raw pg loop inserting the same rows with one insert ... select
 * per transaction. Goal ≥ 0.5. The organization's monthly quota is used up, so each publish
 * runs its whole path (one statement reading the organization and recording the event and
 * its 100 deliveries, then the answer) but records the deliveries failed: no delivery work
 * competes with the measurement, and the raw side writes the same failed rows (checked
 * after the run). A publish with nothing left to send takes no lock on the quota's row, so
 * this figure does not measure that lock; test/events/publish.test.ts covers concurrent
 * publishes near the quota.
 */
import { startLoad } from '../lib';
import { quotaRefusalOf } from '../../src/endpoints';
import { CONNECTIONS, DATABASE_URL, PAIRS, SEGMENT_SECONDS, WARMUP_SECONDS, addThroughputFigure, diagnostics, failedFigure, fmtMs, loadSide, log, requireClean, rounds, withLoads } from '../harness';
import { INTERNAL_TOKEN, type Context } from '../context';

/** Subscribed endpoints of the organization the fan-out figure publishes to. */
export const FAN_OUT_ENDPOINTS = 100;
export const FAN_OUT_GOAL = 0.5;

export async function benchPublishFanOut(ctx: Context): Promise<void> {
  const id = 'publish_fan_out';
  const name = `PublishEvent deliveries recorded/s, ${FAN_OUT_ENDPOINTS} subscribed endpoints ÷ raw pg insert of the same rows`;
  try {
    const organizationId = ctx.tenants.fanout!.organizationId;
    const eventType = 'post.held';
    await ctx.pool.query(`update organizations set plan = 'enterprise', monthly_delivery_quota = 1 where id = $1`, [organizationId]);
    await ctx.pool.query(`insert into delivery_usage (organization_id, month, deliveries) values ($1, date_trunc('month', now() at time zone 'utc')::date, 1)`, [organizationId]);
    await ctx.pool.query(
      `insert into webhook_endpoints (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
       select gen_random_uuid(), $1, 'https://fanout-' || g || '.example.com/in', '', array[$2::text], 'dev', sha256(g::text::bytea), now(), now()
         from generate_series(1, $3::int) g`,
      [organizationId, eventType, FAN_OUT_ENDPOINTS],
    );
    const spec = (mode: 'service' | 'raw') => ({
      mode,
      baseUrl: ctx.server.ready.url,
      token: INTERNAL_TOKEN,
      databaseUrl: DATABASE_URL,
      organizationId,
      eventType,
      // The raw side writes the reason the service records, so both write the same rows.
      refusal: quotaRefusalOf({ plan: 'enterprise', monthlyDeliveryQuota: 1 }),
      loops: CONNECTIONS,
      warmupSeconds: WARMUP_SECONDS,
    });
    log(`${id}: ${CONNECTIONS} gRPC loops vs ${CONNECTIONS} pg clients, ${FAN_OUT_ENDPOINTS} rows per operation, ${PAIRS} pairs × ${SEGMENT_SECONDS} s`);
    const measured = await withLoads([() => startLoad('load-publish.ts', spec('service')), () => startLoad('load-publish.ts', spec('raw'))], ([service, raw]) =>
      rounds([loadSide('service (publishes)', service!, { seconds: SEGMENT_SECONDS }, ctx.server.proc.pid), loadSide('raw pg (tx)', raw!, { seconds: SEGMENT_SECONDS })]),
    );
    const [a, b] = measured.summaries;
    requireClean(a!, 'service');
    requireClean(b!, 'raw pg');
    // What the figure claims: every row of both sides failed over the quota, with one reason, so no delivery work competed.
    const { rows: written } = await ctx.pool.query<{ rows: string; sendable: string; reasons: string }>(
      `select count(*) as rows, count(*) filter (where status <> 'failed') as sendable, count(distinct last_error) as reasons
         from webhook_deliveries where organization_id = $1`,
      [organizationId],
    );
    if (Number(written[0]!.sendable) > 0 || Number(written[0]!.reasons) !== 1) {
      throw new Error(`the two sides did not write the same failed rows: ${JSON.stringify(written[0])}`);
    }
    diagnostics.push(`publish fan-out: service ${fmtMs(a!.cpuMsPerOp)} CPU per publish of ${FAN_OUT_ENDPOINTS} deliveries (${a!.cores?.toFixed(2)} cores busy); ${written[0]!.rows} rows written by both sides, all failed with one reason`);
    addThroughputFigure({
      id,
      figure: name,
      unit: 'deliveries/s',
      baselineUnit: 'rows/s',
      scale: FAN_OUT_ENDPOINTS,
      goal: `≥ ${FAN_OUT_GOAL}`,
      check: (r) => r >= FAN_OUT_GOAL,
      measured,
      detail: { service: a, rawPg: b, endpoints: FAN_OUT_ENDPOINTS, connections: CONNECTIONS },
    });
  } catch (error) {
    failedFigure(id, name, `≥ ${FAN_OUT_GOAL}`, error);
  }
}
