import { Kysely, PostgresDialect, sql, type QueryCreator } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import type { DeliveryUsageSchema, OrganizationSchema, WebhookDeliverySchema, WebhookEndpointSchema } from '../../src/db';
import { fanOutInsert, type FanOutRow } from '../../src/delivery';
import { deliveryGrants, publishingOrganizations, subscribedEndpoints, type NewEventRow } from '../../src/endpoints';

/**
 * The publish's statement is wired from parts other modules own (src/db/cte.ts). Each part
 * names the CTEs it reads with their columns, so a statement that hands a part the wrong
 * name or the wrong columns does not compile: the `@ts-expect-error` lines below are checked
 * by the type check (`tsc`), which fails if one of them compiles.
 */
type Tables = InferKyselyDB<typeof OrganizationSchema | typeof DeliveryUsageSchema | typeof WebhookEndpointSchema | typeof WebhookDeliverySchema>;

// Compiles SQL only; never connects.
const k = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: async () => Promise.reject(new Error('not connected')) }) });

const events = (qc: QueryCreator<Tables>) =>
  qc.with('new_events', (w) => w.selectNoFrom([sql<string>`o`.as('organization_id'), sql<string>`t`.as('event_type'), sql<string | null>`null`.as('except_endpoint_id'), sql<number>`1`.as('i')]));

function wired() {
  const planned = publishingOrganizations(events(k), ['00000000-0000-0000-0000-000000000000'], '2026-11-01').with('subscribed', (w) => subscribedEndpoints(w));
  return deliveryGrants(planned, '2026-11-01')
    .with('fan_out', (w) =>
      w
        .selectFrom('granted as g')
        .select(['g.organization_id', 'g.endpoint_id', 'g.sendable', 'g.refusal'])
        .select([sql<string>`gen_random_uuid()`.as('id'), sql<string>`'e'`.as('event_id'), sql<string>`'t'`.as('event_type'), sql<string>`'{}'`.as('body'), sql<string>`'h'`.as('workflow_head'), sql<string>`'t'`.as('workflow_tail')]),
    )
    .with('delivered', (w) => fanOutInsert(w, new Date(0)))
    .selectFrom('delivered')
    .select('delivered.id');
}

export function miswired() {
  // The subscription rule reads `new_events` and `organization`: without the organizations, it does not compile.
  // @ts-expect-error -- no CTE `organization`
  events(k).with('subscribed', (w) => subscribedEndpoints(w));

  // A `new_events` without the endpoint it excepts.
  const partial = publishingOrganizations(
    k.with('new_events', (w) => w.selectNoFrom([sql<string>`o`.as('organization_id'), sql<string>`t`.as('event_type'), sql<number>`1`.as('i')])),
    [],
    '2026-11-01',
  );
  // @ts-expect-error -- `new_events` lacks except_endpoint_id
  partial.with('subscribed', (w) => subscribedEndpoints(w));

  // The grant decision reads `subscribed`: the same rows under another name do not do.
  const renamed = publishingOrganizations(events(k), [], '2026-11-01').with('subscribed_endpoints', (w) => subscribedEndpoints(w));
  // @ts-expect-error -- no CTE `subscribed`
  deliveryGrants(renamed, '2026-11-01');

  // The deliveries' insert reads `fan_out` with a refusal of type text.
  const wrongType = k.with('fan_out', (w) =>
    w.selectNoFrom([
      sql<string>`gen_random_uuid()`.as('id'),
      sql<string>`o`.as('organization_id'),
      sql<string>`e`.as('endpoint_id'),
      sql<string>`v`.as('event_id'),
      sql<string>`t`.as('event_type'),
      sql<string>`b`.as('body'),
      sql<string>`h`.as('workflow_head'),
      sql<string>`t`.as('workflow_tail'),
      sql<boolean>`true`.as('sendable'),
      sql<number>`1`.as('refusal'),
    ]),
  );
  // @ts-expect-error -- `fan_out.refusal` is not text
  wrongType.with('delivered', (w) => fanOutInsert(w, new Date(0)));
  const row: FanOutRow | NewEventRow | null = null;
  return row;
}

it("places each part's CTEs in the statement's WITH list, in the order they are wired", () => {
  const compiled = wired().compile().sql;
  const names = [...compiled.matchAll(/(?:^with |\), )"(\w+)" as \(/g)].map((m) => m[1]);
  expect(names).toEqual(['new_events', 'organization_plan', 'organization', 'subscribed', 'wanted', 'quota_locked', 'quota_granted', 'granted', 'fan_out', 'delivered']);
});
