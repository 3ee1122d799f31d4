/**
 * What the fault run checks, per delivery, against what the README promises; every check is
 * printed, and the failed ones are kept for the run's verdict. The figures per engine add up here.
 */
import type { HttpsReceiver } from '../../test/support/https-receiver';
import { INTERRUPTED_ATTEMPT } from '../../src/delivery';
import { sql } from './database';

export type Engine = 'embedded' | 'temporal';
const TERMINAL = ['delivered', 'dead_lettered', 'failed'];

export const violations: string[] = [];
const newCounts = () => ({ faultsInjected: 0, deliveries: 0, lost: 0, unexplainedArrivals: 0 });
export const totals: Record<Engine, ReturnType<typeof newCounts>> = { embedded: newCounts(), temporal: newCounts() };
/** The engine whose scenarios are running: their figures add up here. */
let current: Engine = 'embedded';

export function countFor(engine: Engine): void {
  current = engine;
}

export function counts(): ReturnType<typeof newCounts> {
  return totals[current];
}

export function check(ok: boolean, message: string): void {
  if (!ok) violations.push(message);
  console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${message}`);
}

export interface SettledRow {
  id: string;
  event_id: string;
  /** The endpoint's URL: one event fans out to several endpoints, each on a path of its own. */
  url: string;
  status: string;
  attempt_count: number;
  last_error: string | null;
}

export async function waitUntilSettled(deliveryIds: string[], timeoutMs: number): Promise<Map<string, SettledRow>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await sql<SettledRow>(
      `select d.id, d.event_id, e.url, d.status, d.attempt_count, d.last_error
         from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id where d.id = any($1)`,
      [deliveryIds],
    ).catch(() => []);
    const settled = rows.filter((r) => TERMINAL.includes(r.status));
    if (settled.length === deliveryIds.length || Date.now() > deadline) return new Map(rows.map((r) => [r.id, r]));
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * The README's promises, per delivery (an event at one endpoint): every arrival at the
 * receiver is an attempt recorded as sent (and the reverse, but for an attempt the service was
 * killed between recording it sent and writing it: `allowUnsentInterrupted`), a delivered
 * event has exactly one successful attempt, and nothing arrives that no accepted call recorded.
 */
export async function checkPerEvent(
  label: string,
  receivers: HttpsReceiver[],
  rows: Map<string, SettledRow>,
  options: { allowUnsentInterrupted?: boolean } = {},
): Promise<void> {
  const ids = [...rows.keys()];
  const attempts = await sql<{ delivery_id: string; dispatched: number; succeeded: number; interrupted: number }>(
    `select delivery_id,
            count(*) filter (where dispatched_at is not null)::int as dispatched,
            count(*) filter (where response_status between 200 and 299)::int as succeeded,
            count(*) filter (where error = $2)::int as interrupted
       from delivery_attempts where delivery_id = any($1) group by delivery_id`,
    [ids, INTERRUPTED_ATTEMPT],
  );
  const byDelivery = new Map(attempts.map((a) => [a.delivery_id, a]));
  // An arrival belongs to the delivery of its event to the endpoint whose path it came on.
  const deliveryKey = (endpointPath: string, eventId: string) => `${endpointPath} ${eventId}`;
  const arrivals = new Map<string, number>();
  const successfulArrivals = new Map<string, number>();
  for (const receiver of receivers) {
    for (const request of receiver.requests) {
      const key = deliveryKey(request.path, (JSON.parse(request.rawBody) as { id: string }).id);
      arrivals.set(key, (arrivals.get(key) ?? 0) + 1);
      if (request.answered !== undefined && request.answered >= 200 && request.answered < 300) {
        successfulArrivals.set(key, (successfulArrivals.get(key) ?? 0) + 1);
      }
    }
  }
  const keyOf = (row: SettledRow) => deliveryKey(new URL(row.url).pathname, row.event_id);
  const known = new Set([...rows.values()].map(keyOf));
  const strangers = [...arrivals.keys()].filter((e) => !known.has(e));
  counts().unexplainedArrivals += strangers.length;
  check(strangers.length === 0, `${label}: no arrival without an accepted call (${strangers.length} unknown deliveries)`);

  const mismatched: string[] = [];
  const withinWindow: string[] = [];
  const notOneSuccess: string[] = [];
  for (const row of rows.values()) {
    const recorded = byDelivery.get(row.id) ?? { dispatched: 0, succeeded: 0, interrupted: 0 };
    const arrived = arrivals.get(keyOf(row)) ?? 0;
    if (arrived !== recorded.dispatched) {
      const killedBeforeWrite = options.allowUnsentInterrupted && arrived === recorded.dispatched - 1 && recorded.interrupted >= 1;
      (killedBeforeWrite ? withinWindow : mismatched).push(`${row.event_id}: ${arrived} arrived, ${recorded.dispatched} recorded sent`);
    }
    if (row.status === 'delivered' && recorded.succeeded !== 1) notOneSuccess.push(`${row.event_id}: ${recorded.succeeded} successful attempts`);
    if (row.status === 'delivered' && (successfulArrivals.get(keyOf(row)) ?? 0) > 1 + recorded.interrupted) {
      notOneSuccess.push(`${row.event_id}: answered 2xx ${successfulArrivals.get(keyOf(row))} times`);
    }
  }
  check(mismatched.length === 0, `${label}: per delivery, arrivals equal attempts recorded as sent${mismatched.length ? ` (${mismatched.slice(0, 5).join('; ')})` : ''}`);
  if (withinWindow.length > 0) console.log(`       ${withinWindow.length} event(s) killed between recording an attempt sent and writing it (README window): ${withinWindow.join('; ')}`);
  check(notOneSuccess.length === 0, `${label}: exactly one successful attempt per delivered event${notOneSuccess.length ? ` (${notOneSuccess.slice(0, 5).join('; ')})` : ''}`);
}

/** Adds the deliveries to the engine's figures: lost is one that never reached a final state. */
export function tally(ids: string[], settled: Map<string, SettledRow>): void {
  for (const id of ids) {
    counts().deliveries++;
    if (!TERMINAL.includes(settled.get(id)?.status ?? '')) counts().lost++;
  }
}
