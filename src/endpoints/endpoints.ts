import type { Kysely } from 'kysely';
import type { InferKyselyDB } from '@mikro-orm/sql';
import { CompiledStatement, epochMs, isUuid, WebhookEndpointSchema, type LockMode, type Cursor, type EntityManager, type SignatureScheme, type WebhookEndpoint } from '../db';
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
  /** 'customer' or 'failing' while paused. */
  pauseReason: string | null;
  failingSinceMs: number | null;
  createdAtMs: number;
}

/** The list's columns of an organization's endpoints, in the list's order. */
function pageQuery(k: Kysely<Tables>, organizationId: string) {
  return k
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
      'pause_reason as pauseReason',
      epochMs<number | null>('failing_since').as('failingSinceMs'),
      epochMs('created_at').as('createdAtMs'),
    ])
    .where('organization_id', '=', organizationId)
    .orderBy('created_at')
    .orderBy('id');
}

// Built once and prepared: building the page's tree and planning it were a tenth of a list call's CPU.
const firstPage = new CompiledStatement((k: Kysely<Tables>, p: { organizationId: string; limit: number }) => pageQuery(k, p.organizationId).limit(p.limit), { prepare: true });
const laterPage = new CompiledStatement(
  (k: Kysely<Tables>, p: { organizationId: string; at: Date; id: string; limit: number }) =>
    pageQuery(k, p.organizationId)
      .where((eb) => eb.or([eb('created_at', '>', p.at), eb.and([eb('created_at', '=', p.at), eb('id', '>', p.id)])]))
      .limit(p.limit),
  { prepare: true },
);

/**
 * Up to `limit` endpoints of an organization, oldest first, after `cursor`. Plain rows: the
 * list only shows them, and hydrating them as entities into the unit of work was a sixth of
 * the list call's CPU (bench/README.md, List).
 */
export async function endpointsPage(em: EntityManager, organizationId: string, cursor: Cursor | null, limit: number): Promise<ListedEndpoint[]> {
  if (!cursor) return firstPage.execute(db(em), { organizationId, limit });
  return laterPage.execute(db(em), { organizationId, at: new Date(cursor.at), id: cursor.id, limit });
}

/** A new endpoint's row, as createWebhook writes it. */
export type NewEndpoint = Pick<WebhookEndpoint, 'id' | 'organizationId' | 'url' | 'description' | 'eventNames' | 'secretKeyId' | 'secretCiphertext' | 'signatureScheme' | 'createdAt'>;

// One prepared insert: the unit of work's change tracking was about a sixth of a create's
// CPU, and building the insert with each call another tenth (bench/README.md, Create).
const insertStatement = new CompiledStatement(
  (k: Kysely<Tables>, p: NewEndpoint) =>
    k.insertInto('webhook_endpoints').values({
      id: p.id,
      organization_id: p.organizationId,
      url: p.url,
      description: p.description,
      event_names: p.eventNames,
      secret_key_id: p.secretKeyId,
      secret_ciphertext: p.secretCiphertext,
      signature_scheme: p.signatureScheme,
      created_at: p.createdAt,
      updated_at: p.createdAt,
    }),
  { prepare: true },
);

export async function insertEndpoint(em: EntityManager, row: NewEndpoint): Promise<void> {
  await insertStatement.execute(db(em), row);
}

/** An endpoint of the organization by id; another organization's, or none, is WEBHOOK_NOT_FOUND. */
export async function organizationEndpoint(em: EntityManager, organizationId: string, id: string, lockMode?: LockMode): Promise<WebhookEndpoint> {
  const endpoint = isUuid(id) ? await em.findOne(WebhookEndpointSchema, { id, organizationId }, lockMode ? { lockMode } : {}) : null;
  if (!endpoint) throw apiError('WEBHOOK_NOT_FOUND', `No webhook endpoint ${id.slice(0, 64)} in this organization.`);
  return endpoint;
}
