import type { Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { epochMs, isUuid, WebhookEndpointSchema, type LockMode, type Cursor, type EntityManager, type SignatureScheme, type WebhookEndpoint } from '../db';
import { apiError } from '../errors';

type Tables = InferKyselyDB<typeof WebhookEndpointSchema>;
const db = (em: EntityManager): Kysely<Tables> => em.getKysely<Tables>();

/** An endpoint as the list shows it (never its secret), timestamps as epoch milliseconds. */
export interface ListedEndpoint {
  id: string;
  url: string;
  description: string;
  eventNames: string[];
  signatureScheme: SignatureScheme;
  /** The scheme, start and end of the last rotation's overlap, whether it still runs or not. */
  previousSignatureScheme: SignatureScheme | null;
  rotationStartedAtMs: number | null;
  rotationEndsAtMs: number | null;
  disabledAtMs: number | null;
  pausedAtMs: number | null;
  createdAtMs: number;
}

/**
 * Up to `limit` endpoints of an organization, oldest first, after `cursor`. Plain rows: the
 * list only shows them, and hydrating them as entities into the unit of work was a sixth of
 * the list call's CPU (bench/README.md, List).
 */
export async function endpointsPage(em: EntityManager, organizationId: string, cursor: Cursor | null, limit: number): Promise<ListedEndpoint[]> {
  let query = db(em)
    .selectFrom('webhook_endpoints')
    .select([
      'id',
      'url',
      'description',
      'event_names as eventNames',
      'signature_scheme as signatureScheme',
      'previous_signature_scheme as previousSignatureScheme',
      epochMs<number | null>('rotation_started_at').as('rotationStartedAtMs'),
      epochMs<number | null>('rotation_ends_at').as('rotationEndsAtMs'),
      epochMs<number | null>('disabled_at').as('disabledAtMs'),
      epochMs<number | null>('paused_at').as('pausedAtMs'),
      epochMs('created_at').as('createdAtMs'),
    ])
    .where('organization_id', '=', organizationId);
  if (cursor) {
    const at = new Date(cursor.at);
    const id = cursor.id;
    query = query.where((eb) => eb.or([eb('created_at', '>', at), eb.and([eb('created_at', '=', at), eb('id', '>', id)])]));
  }
  return query.orderBy('created_at').orderBy('id').limit(limit).execute();
}

/** An endpoint of the organization by id; another organization's, or none, is WEBHOOK_NOT_FOUND. */
export async function organizationEndpoint(em: EntityManager, organizationId: string, id: string, lockMode?: LockMode): Promise<WebhookEndpoint> {
  const endpoint = isUuid(id) ? await em.findOne(WebhookEndpointSchema, { id, organizationId }, lockMode ? { lockMode } : {}) : null;
  if (!endpoint) throw apiError('WEBHOOK_NOT_FOUND', `No webhook endpoint ${id.slice(0, 64)} in this organization.`);
  return endpoint;
}
