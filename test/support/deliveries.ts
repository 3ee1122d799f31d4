import { createHmac, randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { WebhookEndpointSchema, type EntityManager, type MikroORM } from '../../src/db';
import { createOrganization } from '../../src/auth';
import { workflowIdFor, type DeliveryRecords, type DeliveryRef } from '../../src/delivery';
import { SecretBox, newSigningSecret } from '../../src/secrets';

/**
 * Delivery fixtures written below the API: an organization, an endpoint (its secret sealed
 * as the service seals it) and deliveries recorded through DeliveryRecords, the owner of
 * the delivery rows. Reads of stored rows go straight to SQL so that a test sees what is
 * stored, not what the owner's own reads make of it.
 */
export const TEST_SECRETS = new SecretBox(new Map([['k', Buffer.alloc(32, 7)]]), 'k');

export async function organization(orm: MikroORM, name = 'Deliveries'): Promise<string> {
  return (await createOrganization(orm.em.fork(), { name, plan: 'scale' })).id;
}

export async function endpoint(
  orm: MikroORM,
  organizationId: string,
  options: { url?: string; disabled?: boolean } = {},
): Promise<{ id: string; secret: string }> {
  const em = orm.em.fork();
  const id = randomUUID();
  const secret = newSigningSecret();
  const sealed = TEST_SECRETS.seal(secret, id);
  em.create(WebhookEndpointSchema, {
    id,
    organizationId,
    url: options.url ?? 'https://hooks.example.com/in',
    description: '',
    eventNames: ['webhook.test'],
    secretKeyId: sealed.keyId,
    secretCiphertext: sealed.ciphertext,
    disabledAt: options.disabled ? new Date() : null,
  });
  await em.flush();
  return { id, secret };
}

/** Records one webhook.test delivery (pending, due at the records' clock) and returns its ref. */
export async function recordDelivery(
  orm: MikroORM,
  records: DeliveryRecords,
  organizationId: string,
  endpointId: string,
  eventId = `evt_${randomUUID()}`,
): Promise<DeliveryRef> {
  const ref = { organizationId, endpointId, eventId };
  const payload = JSON.stringify({ id: eventId, type: 'webhook.test', data: { endpointId } });
  const [row] = await records.record(orm.em.fork(), [{ ...ref, eventType: 'webhook.test', payload, workflowId: workflowIdFor(ref) }]);
  return { deliveryId: row!.id, ...ref };
}

export interface StoredDelivery {
  status: string;
  attempt_count: number;
  last_error: string | null;
  last_response_status: number | null;
  lease_owner: string | null;
  /** Timestamps as epoch milliseconds. */
  next_attempt_at: number | null;
  lease_until: number | null;
  delivered_at: number | null;
}

export interface StoredAttempt {
  attempt: number;
  started_at: number;
  dispatched_at: number | null;
  finished_at: number | null;
  response_status: number | null;
  error: string | null;
}

const ms = (column: string) => `(extract(epoch from ${column}) * 1000)::float8 as ${column}`;

export async function storedDelivery(orm: MikroORM, deliveryId: string): Promise<StoredDelivery> {
  const [row] = await orm.em
    .fork()
    .execute<StoredDelivery[]>(
      `select status, attempt_count, last_error, last_response_status, lease_owner, ${ms('next_attempt_at')}, ${ms('lease_until')}, ${ms('delivered_at')}
         from webhook_deliveries where id = ?`,
      [deliveryId],
    );
  if (!row) throw new Error(`no delivery ${deliveryId}`);
  return row;
}

export async function storedAttempts(orm: MikroORM, deliveryId: string): Promise<StoredAttempt[]> {
  return orm.em
    .fork()
    .execute<StoredAttempt[]>(
      `select attempt, ${ms('started_at')}, ${ms('dispatched_at')}, ${ms('finished_at')}, response_status, error
         from delivery_attempts where delivery_id = ? order by attempt`,
      [deliveryId],
    );
}

export async function storedDeadLetters(orm: MikroORM, deliveryId: string): Promise<{ organization_id: string; endpoint_id: string; last_error: string | null }[]> {
  return orm.em.fork().execute('select organization_id, endpoint_id, last_error from dead_letters where delivery_id = ?', [deliveryId]);
}

/** Polls the stored delivery until it matches; the explicit signal for effects of an engine running on its own. */
export async function untilStored(
  orm: MikroORM,
  deliveryId: string,
  predicate: (row: StoredDelivery) => boolean,
  timeoutMs = 20_000,
): Promise<StoredDelivery> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const row = await storedDelivery(orm, deliveryId);
    if (predicate(row)) return row;
    if (Date.now() > deadline) throw new Error(`delivery ${deliveryId} never matched within ${timeoutMs} ms; last: ${JSON.stringify(row)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Whether a received request carries a valid signature of its exact body under `secret`. */
export function signedWith(request: { headers: IncomingHttpHeaders; rawBody: string }, secret: string): boolean {
  const timestamp = request.headers['x-service-timestamp'];
  if (typeof timestamp !== 'string' || !/^\d+$/.test(timestamp)) return false;
  return request.headers['x-service-signature'] === createHmac('sha256', secret).update(`${timestamp}.${request.rawBody}`).digest('hex');
}

/**
 * `count` endpoints subscribed to `eventNames`, written in one statement (the API would take
 * a call each), their secrets sealed under `box` as the service seals them, each at
 * `${urlPrefix}<endpoint id>` so that a received request names the endpoint it was for.
 * Returns each endpoint's secret by id.
 */
export async function subscribedEndpoints(
  em: EntityManager,
  box: SecretBox,
  organizationId: string,
  options: { urlPrefix: string; count: number; eventNames: string[] },
): Promise<Map<string, string>> {
  const secrets = new Map<string, string>();
  const rows = Array.from({ length: options.count }, () => {
    const id = randomUUID();
    const secret = newSigningSecret();
    secrets.set(id, secret);
    return { id, sealed: box.seal(secret, id) };
  });
  await em.execute(
    `insert into webhook_endpoints (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
     select id, ?, ? || id::text, '', ?::text[], key_id, decode(sealed, 'hex'), now(), now()
       from unnest(?::uuid[], ?::text[], ?::text[]) as r(id, key_id, sealed)`,
    [
      organizationId,
      options.urlPrefix,
      `{${options.eventNames.join(',')}}`,
      `{${rows.map((r) => r.id).join(',')}}`,
      `{${rows.map((r) => r.sealed.keyId).join(',')}}`,
      `{${rows.map((r) => r.sealed.ciphertext.toString('hex')).join(',')}}`,
    ],
    'run',
  );
  return secrets;
}
