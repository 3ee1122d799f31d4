import { randomUUID } from 'node:crypto';
import type { Timestamp } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type {
  CreateWebhookRequest,
  CreateWebhookResponse,
  DeleteWebhookResponse,
  TestWebhookResponse,
  DeleteWebhookRequest,
  ListWebhooksRequest,
  ListWebhooksResponse,
  TestWebhookRequest,
  WebhookDelivery as DeliveryMessage,
  WebhookEndpoint as EndpointMessage,
  WebhookService,
} from '../gen/publishing/v1/webhook_service_pb';
import { requireCustomer } from '../auth';
import type { Logger } from '../config';
import {
  OrganizationSchema,
  decodeCursor,
  entityManagerOf,
  pageOf,
  pageSizeOf,
  type EntityManager,
  type WebhookEndpoint,
} from '../db';
import { apiError } from '../errors';
import { workflowIdFor, type DeliveryEngine, type DeliveryRecords, type ListedDelivery } from '../delivery';
import { validateEndpointUrl } from './endpoint-url';
import { endpointsPage, organizationEndpoint, type ListedEndpoint } from './endpoints';
import { normalizeEventNames } from './event-names';
import { takeDeliveryQuota } from './plans';
import type { WebhookRateLimiter } from './rate-limit';
import { type SecretBox, newSigningSecret } from '../secrets';

export interface WebhookServiceDeps {
  secrets: SecretBox;
  limiter: WebhookRateLimiter;
  /** Owner of the delivery rows. */
  deliveries: DeliveryRecords;
  engine: DeliveryEngine;
  /** CIDRs exempt from the address check of endpoint URLs (tests only). */
  allowCidrs: string[];
  logger: Logger;
  now: () => number;
}

const MAX_DESCRIPTION_LENGTH = 500;

/**
 * The endpoint routes of WebhookService. The delivery log, resends and recoveries are the
 * recovery module's (src/recovery); the routes put both behind the one service.
 */
export class WebhookServiceImpl implements Partial<ServiceImpl<typeof WebhookService>> {
  constructor(private readonly deps: WebhookServiceDeps) {}

  async listWebhooks(req: ListWebhooksRequest, ctx: HandlerContext): Promise<ListWebhooksResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    const endpoints = await endpointsPage(em, principal.organizationId, cursor, limit + 1);
    const { page, nextPageToken } = pageOf(endpoints, limit, (e) => new Date(e.createdAtMs));
    const recent = await this.deps.deliveries.listRecent(em, page.map((e) => e.id));
    return {
      $typeName: 'publishing.v1.ListWebhooksResponse',
      endpoints: page.map((e) => listedEndpointMessage(e, recent.get(e.id) ?? [])),
      nextPageToken,
    };
  }

  async createWebhook(req: CreateWebhookRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const url = validateEndpointUrl(req.url, { allowCidrs: this.deps.allowCidrs });
    if (!url.ok) throw apiError(url.code as Parameters<typeof apiError>[0], url.message);
    const description = req.description.trim();
    if ([...description].length > MAX_DESCRIPTION_LENGTH) {
      throw apiError('WEBHOOK_DESCRIPTION_TOO_LONG', `The description must be at most ${MAX_DESCRIPTION_LENGTH} characters.`);
    }
    const eventNames = normalizeEventNames(req.eventNames);
    const id = randomUUID();
    const signingSecret = newSigningSecret();
    const sealed = this.deps.secrets.seal(signingSecret, id);
    const now = new Date(this.deps.now());
    await insertEndpoint(em, {
      id,
      organizationId: principal.organizationId,
      url: url.url,
      description,
      eventNames,
      secretKeyId: sealed.keyId,
      secretCiphertext: sealed.ciphertext,
      createdAt: now,
    });
    return {
      $typeName: 'publishing.v1.CreateWebhookResponse',
      endpoint: endpointMessage({ id, url: url.url, description, eventNames, disabledAt: null, createdAt: now }, []),
      signingSecret,
    } satisfies CreateWebhookResponse;
  }

  async testWebhook(req: TestWebhookRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    // Two round trips at once, not one after the other; the rate limit's refusal still comes first.
    const [decision, found] = await Promise.allSettled([this.deps.limiter.take(principal.organizationId), this.endpoint(em, principal.organizationId, req.id)]);
    if (decision.status === 'rejected') throw decision.reason;
    for (const [name, value] of Object.entries(decision.value.headers)) ctx.responseHeader.set(name, value);
    if (found.status === 'rejected') throw found.reason;
    const endpoint = found.value;
    if (endpoint.disabledAt) throw apiError('WEBHOOK_DISABLED', 'This endpoint is disabled; nothing is sent to it.');

    const now = new Date(this.deps.now());
    const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
    const ref = { organizationId: principal.organizationId, endpointId: endpoint.id, eventId };
    const payload = JSON.stringify({
      id: eventId,
      type: 'webhook.test',
      createdAt: now.toISOString(),
      data: { endpointId: endpoint.id, message: 'This is a test delivery from the publishing platform.' },
    });
    const [delivery] = await em.transactional(async (tx) => {
      const organization = await tx.findOneOrFail(OrganizationSchema, { id: principal.organizationId });
      await takeDeliveryQuota(tx, organization, now);
      return this.deps.deliveries.record(tx, [{ ...ref, eventType: 'webhook.test', payload, workflowId: workflowIdFor(ref) }]);
    });
    if (!delivery) throw new Error('the recorded delivery was not read back');
    try {
      await this.deps.engine.start({ deliveryId: delivery.id, ...ref }, { eventType: 'webhook.test', targetHost: new URL(endpoint.url).host });
    } catch (error) {
      // Recorded and pending: the pending sweep starts it once the engine answers (Temporal unreachable, say).
      this.deps.logger.warn({ err: error, deliveryId: delivery.id }, 'could not start a test delivery; the pending sweep retries it');
    }
    return { $typeName: 'publishing.v1.TestWebhookResponse', delivery: deliveryMessage(delivery) } satisfies TestWebhookResponse;
  }

  async deleteWebhook(req: DeleteWebhookRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const endpoint = await this.endpoint(em, principal.organizationId, req.id);
    if (!endpoint.disabledAt) {
      endpoint.disabledAt = new Date(this.deps.now());
      await em.flush();
    }
    return { $typeName: 'publishing.v1.DeleteWebhookResponse', endpoint: endpointMessage(endpoint, []) } satisfies DeleteWebhookResponse;
  }

  private async endpoint(em: EntityManager, organizationId: string, id: string): Promise<WebhookEndpoint> {
    return organizationEndpoint(em, organizationId, id);
  }
}

/**
 * One insert statement: creating an endpoint writes one row, and the unit of work's
 * change tracking cost about a sixth of the call's CPU (README, Benchmarks).
 */
async function insertEndpoint(
  em: EntityManager,
  row: Pick<WebhookEndpoint, 'id' | 'organizationId' | 'url' | 'description' | 'eventNames' | 'secretKeyId' | 'secretCiphertext' | 'createdAt'>,
): Promise<void> {
  await em.execute(
    `insert into webhook_endpoints
       (id, organization_id, url, description, event_names, secret_key_id, secret_ciphertext, created_at, updated_at)
     values (?, ?, ?, ?, ?::text[], ?, ?, ?, ?)`,
    [row.id, row.organizationId, row.url, row.description, em.getPlatform().marshallArray(row.eventNames), row.secretKeyId, row.secretCiphertext, row.createdAt, row.createdAt],
    'run',
  );
}

/*
 * The answers are built as message literals: every field is given, so nothing is left for
 * `create()` to fill in, and connect-es takes a message as it is instead of copying it.
 */

function endpointMessage(e: Pick<WebhookEndpoint, 'id' | 'url' | 'description' | 'eventNames' | 'disabledAt' | 'createdAt'>, recent: ListedDelivery[]): EndpointMessage {
  return listedEndpointMessage(
    { id: e.id, url: e.url, description: e.description, eventNames: e.eventNames, disabledAtMs: e.disabledAt ? e.disabledAt.getTime() : null, createdAtMs: e.createdAt.getTime() },
    recent,
  );
}

function listedEndpointMessage(e: ListedEndpoint, recent: ListedDelivery[]): EndpointMessage {
  return {
    $typeName: 'publishing.v1.WebhookEndpoint',
    id: e.id,
    url: e.url,
    description: e.description,
    eventNames: e.eventNames,
    disabled: e.disabledAtMs !== null,
    disabledAt: e.disabledAtMs === null ? undefined : timestampOf(e.disabledAtMs),
    createdAt: timestampOf(e.createdAtMs),
    recentDeliveries: recent.map(deliveryMessage),
  };
}

export function deliveryMessage(d: ListedDelivery): DeliveryMessage {
  return {
    $typeName: 'publishing.v1.WebhookDelivery',
    id: d.id,
    endpointId: d.endpointId,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    attemptCount: d.attemptCount,
    nextAttemptAt: d.nextAttemptAtMs === null ? undefined : timestampOf(d.nextAttemptAtMs),
    lastError: d.lastError ?? '',
    lastResponseStatus: d.lastResponseStatus ?? 0,
    createdAt: timestampOf(d.createdAtMs),
    updatedAt: timestampOf(d.updatedAtMs),
    deliveredAt: d.deliveredAtMs === null ? undefined : timestampOf(d.deliveredAtMs),
    workflowId: d.workflowId,
  };
}

/**
 * As Protobuf-ES's timestampFromMs (whole seconds down, the rest as nanoseconds), as a message
 * literal: timestampFromMs goes through create(), and a list answers with up to 250 deliveries.
 */
export function timestampOf(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return { $typeName: 'google.protobuf.Timestamp', seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}
