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
  PauseWebhookRequest,
  PauseWebhookResponse,
  ResumeWebhookRequest,
  ResumeWebhookResponse,
  ListWebhooksResponse,
  RotateWebhookSecretRequest,
  RotateWebhookSecretResponse,
  SecretRotation,
  TestWebhookRequest,
  UpdateWebhookRequest,
  UpdateWebhookResponse,
  WebhookDelivery as DeliveryMessage,
  WebhookEndpoint as EndpointMessage,
  WebhookService,
} from '../gen/publishing/v1/webhook_service_pb';
import { auditedTransaction, noteAuditTarget } from '../audit';
import { requireCustomer } from '../auth';
import type { Logger } from '../config';
import {
  OrganizationSchema,
  decodeCursor,
  entityManagerOf,
  LockMode,
  pageOf,
  pageSizeOf,
  type EntityManager,
  type WebhookEndpoint,
} from '../db';
import { apiError } from '../errors';
import { workflowIdFor, type DeliveryEngine, type DeliveryRecords, type ListedDelivery } from '../delivery';
import { validateEndpointUrl } from './endpoint-url';
import { endpointsPage, insertEndpoint, normalizeEventNames, organizationEndpoint, takeDeliveryQuota, type ListedEndpoint } from '../endpoints';
import type { WebhookRateLimiter } from './rate-limit';
import type { SecretBox } from '../secrets';
import { overlapRunning } from '../signatures';
import { DEFAULT_OVERLAP_SECONDS, newSecretFor, overlapSecondsOf, rotateSigningSecret, signatureSchemeOf } from './signing-secrets';
import type { EventPublisher } from '../events';

export interface WebhookServiceDeps {
  secrets: SecretBox;
  limiter: WebhookRateLimiter;
  /** Owner of the delivery rows. */
  deliveries: DeliveryRecords;
  engine: DeliveryEngine;
  /** Records the `webhook.endpoint.paused` / `.resumed` events in the transaction of the change. */
  events: Pick<EventPublisher, 'forChange'>;
  /** CIDRs exempt from the address check of endpoint URLs (tests only). */
  allowCidrs: string[];
  logger: Logger;
  now: () => number;
}

const MAX_DESCRIPTION_LENGTH = 500;
/** A pause the customer asked for (an automatic one is FAILING_PAUSE). */
const CUSTOMER_PAUSE = 'customer';

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
      endpoints: page.map((e) => listedEndpointMessage(e, recent.get(e.id) ?? [], this.deps.now())),
      nextPageToken,
    };
  }

  async createWebhook(req: CreateWebhookRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const url = this.validUrl(req.url);
    const description = validDescription(req.description);
    const eventNames = normalizeEventNames(req.eventNames);
    const signatureScheme = req.signatureScheme.trim() === '' ? 'legacy' : signatureSchemeOf(req.signatureScheme);
    const id = randomUUID();
    const signingSecret = newSecretFor(signatureScheme);
    const sealed = this.deps.secrets.seal(signingSecret, id);
    const now = new Date(this.deps.now());
    await insertEndpoint(em, {
      id,
      organizationId: principal.organizationId,
      url,
      description,
      eventNames,
      secretKeyId: sealed.keyId,
      secretCiphertext: sealed.ciphertext,
      signatureScheme,
      createdAt: now,
    });
    return {
      $typeName: 'publishing.v1.CreateWebhookResponse',
      endpoint: endpointMessage({ id, url, description, eventNames, signatureScheme, disabledAt: null, pausedAt: null, pauseReason: null, failingSince: null, createdAt: now }, [], now.getTime()),
      signingSecret,
    } satisfies CreateWebhookResponse;
  }

  async updateWebhook(req: UpdateWebhookRequest, ctx: HandlerContext): Promise<UpdateWebhookResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.id, {
      changed: [
        ...(req.url !== undefined ? ['url'] : []),
        ...(req.description !== undefined ? ['description'] : []),
        ...(req.eventNames.length > 0 ? ['eventNames'] : []),
        ...(req.signatureScheme !== undefined ? ['signatureScheme'] : []),
      ],
    });
    // Everything the request says is checked before anything is looked up or changed.
    const url = req.url === undefined ? undefined : this.validUrl(req.url);
    const description = req.description === undefined ? undefined : validDescription(req.description);
    const eventNames = req.eventNames.length === 0 ? undefined : normalizeEventNames(req.eventNames);
    const scheme = req.signatureScheme === undefined ? undefined : signatureSchemeOf(req.signatureScheme);
    const overlapSeconds = overlapSecondsOf(req.overlapSeconds);
    const now = this.deps.now();
    const { endpoint, signingSecret } = await auditedTransaction(ctx, em, async (tx) => {
      const found = await this.changeableEndpoint(tx, principal.organizationId, req.id);
      if (url !== undefined) found.url = url;
      if (description !== undefined) found.description = description;
      if (eventNames !== undefined) found.eventNames = eventNames;
      let secret = '';
      if (scheme !== undefined && scheme !== found.signatureScheme) {
        noteAuditTarget(ctx, found.id, { signatureScheme: scheme, previousSignatureScheme: found.signatureScheme, overlapSeconds });
        secret = rotateSigningSecret(found, { scheme, overlapSeconds, now }, this.deps.secrets);
      }
      return { endpoint: found, signingSecret: secret };
    });
    return { $typeName: 'publishing.v1.UpdateWebhookResponse', endpoint: endpointMessage(endpoint, [], now), signingSecret };
  }

  async rotateWebhookSecret(req: RotateWebhookSecretRequest, ctx: HandlerContext): Promise<RotateWebhookSecretResponse> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.id, { overlapSeconds: req.overlapSeconds ?? DEFAULT_OVERLAP_SECONDS });
    const overlapSeconds = overlapSecondsOf(req.overlapSeconds);
    const now = this.deps.now();
    const { endpoint, signingSecret } = await auditedTransaction(ctx, em, async (tx) => {
      const found = await this.changeableEndpoint(tx, principal.organizationId, req.id);
      const secret = rotateSigningSecret(found, { scheme: found.signatureScheme, overlapSeconds, now }, this.deps.secrets);
      return { endpoint: found, signingSecret: secret };
    });
    return { $typeName: 'publishing.v1.RotateWebhookSecretResponse', endpoint: endpointMessage(endpoint, [], now), signingSecret };
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
    return { $typeName: 'publishing.v1.DeleteWebhookResponse', endpoint: endpointMessage(endpoint, [], this.deps.now()) } satisfies DeleteWebhookResponse;
  }

  async pauseWebhook(req: PauseWebhookRequest, ctx: HandlerContext) {
    return { $typeName: 'publishing.v1.PauseWebhookResponse', endpoint: await this.setPaused(req.id, true, ctx) } satisfies PauseWebhookResponse;
  }

  async resumeWebhook(req: ResumeWebhookRequest, ctx: HandlerContext) {
    return { $typeName: 'publishing.v1.ResumeWebhookResponse', endpoint: await this.setPaused(req.id, false, ctx) } satisfies ResumeWebhookResponse;
  }

  /**
   * Pauses or resumes an endpoint, with its platform event and audit event in the same
   * transaction. A pause needs nothing more: every attempt checks the endpoint (delivery/records/)
   * and holds its delivery as a kill switch would. A resume makes the held deliveries due
   * and, once committed, wakes them (the embedded engine, or each Temporal workflow's
   * release signal). Setting the state an endpoint is in already changes nothing.
   */
  private async setPaused(id: string, paused: boolean, ctx: HandlerContext): Promise<EndpointMessage> {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const events = this.deps.events.forChange();
    const { endpoint, released } = await auditedTransaction(ctx, em, async (tx) => {
      const endpoint = await this.endpoint(tx, principal.organizationId, id, LockMode.PESSIMISTIC_WRITE);
      noteAuditTarget(ctx, endpoint.id);
      if (endpoint.disabledAt) throw apiError('WEBHOOK_DISABLED', 'This endpoint is disabled; it can be neither paused nor resumed.');
      if (Boolean(endpoint.pausedAt) === paused) return { endpoint, released: [] };
      const at = new Date(this.deps.now());
      endpoint.pausedAt = paused ? at : null;
      endpoint.pauseReason = paused ? CUSTOMER_PAUSE : null;
      endpoint.failingSince = null;
      if (!paused) endpoint.resumedAt = at;
      const released = paused ? [] : await this.deps.deliveries.releaseHeldOfEndpoint(tx, principal.organizationId, endpoint.id);
      noteAuditTarget(ctx, endpoint.id, paused ? {} : { releasedDeliveries: released.length });
      const eventType = paused ? 'webhook.endpoint.paused' : 'webhook.endpoint.resumed';
      await events.recordChange(tx, {
        organizationId: principal.organizationId,
        eventType,
        subjectId: endpoint.id,
        at,
        // The endpoint the event is about is not told: paused, it would only hold the event.
        exceptEndpointId: endpoint.id,
        payload: { endpointId: endpoint.id, url: endpoint.url, [paused ? 'pausedAt' : 'resumedAt']: at.toISOString() },
      });
      return { endpoint, released };
    });
    await events.committed();
    if (released.length > 0) {
      // After the commit: waking Temporal workflows goes over the network. A delivery not woken goes when its interval ends.
      await this.deps.engine.release(released).catch((error: unknown) => {
        this.deps.logger.warn({ err: error, released: released.length }, 'could not wake every resumed delivery');
      });
    }
    return endpointMessage(endpoint, [], this.deps.now());
  }

  private endpoint(em: EntityManager, organizationId: string, id: string, lockMode?: LockMode): Promise<WebhookEndpoint> {
    return organizationEndpoint(em, organizationId, id, lockMode);
  }

  /** An active endpoint, locked until the transaction ends: two changes of its secret never interleave. */
  private async changeableEndpoint(tx: EntityManager, organizationId: string, id: string): Promise<WebhookEndpoint> {
    const endpoint = await this.endpoint(tx, organizationId, id, LockMode.PESSIMISTIC_WRITE);
    if (endpoint.disabledAt) throw apiError('WEBHOOK_DISABLED', 'This endpoint is disabled; nothing is sent to it.');
    return endpoint;
  }

  private validUrl(raw: string): string {
    const url = validateEndpointUrl(raw, { allowCidrs: this.deps.allowCidrs });
    if (!url.ok) throw apiError(url.code as Parameters<typeof apiError>[0], url.message);
    return url.url;
  }
}

function validDescription(raw: string): string {
  const description = raw.trim();
  if ([...description].length > MAX_DESCRIPTION_LENGTH) {
    throw apiError('WEBHOOK_DESCRIPTION_TOO_LONG', `The description must be at most ${MAX_DESCRIPTION_LENGTH} characters.`);
  }
  return description;
}

/*
 * The answers are built as message literals: every field is given, so nothing is left for
 * `create()` to fill in, and connect-es takes a message as it is instead of copying it.
 */

type ShownEndpoint = Pick<
  WebhookEndpoint,
  'id' | 'url' | 'description' | 'eventNames' | 'signatureScheme' | 'disabledAt' | 'pausedAt' | 'pauseReason' | 'failingSince' | 'createdAt'
> &
  Partial<Pick<WebhookEndpoint, 'previousSignatureScheme' | 'rotationStartedAt' | 'rotationEndsAt'>>;

function endpointMessage(e: ShownEndpoint, recent: ListedDelivery[], now: number): EndpointMessage {
  return listedEndpointMessage(
    {
      id: e.id,
      url: e.url,
      description: e.description,
      eventNames: e.eventNames,
      signatureScheme: e.signatureScheme,
      previousSignatureScheme: e.previousSignatureScheme ?? null,
      rotationStartedAtMs: e.rotationStartedAt ? e.rotationStartedAt.getTime() : null,
      rotationEndsAtMs: e.rotationEndsAt ? e.rotationEndsAt.getTime() : null,
      disabledAtMs: e.disabledAt ? e.disabledAt.getTime() : null,
      pausedAtMs: e.pausedAt ? e.pausedAt.getTime() : null,
      pauseReason: e.pauseReason ?? null,
      failingSinceMs: e.failingSince ? e.failingSince.getTime() : null,
      createdAtMs: e.createdAt.getTime(),
    },
    recent,
    now,
  );
}

function listedEndpointMessage(e: ListedEndpoint, recent: ListedDelivery[], now: number): EndpointMessage {
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
    signatureScheme: e.signatureScheme,
    secretRotation: secretRotationMessage(e, now),
    state: endpointState(e),
    pausedAt: e.pausedAtMs === null || e.disabledAtMs !== null ? undefined : timestampOf(e.pausedAtMs),
    pauseReason: e.pausedAtMs === null || e.disabledAtMs !== null ? '' : (e.pauseReason ?? CUSTOMER_PAUSE),
    failingSince: e.failingSinceMs === null || e.pausedAtMs === null || e.disabledAtMs !== null ? undefined : timestampOf(e.failingSinceMs),
  };
}

/** The rotation whose overlap runs at `now`, as signing decides it; an ended one is not shown. */
function secretRotationMessage(e: ListedEndpoint, now: number): SecretRotation | undefined {
  if (!overlapRunning(e.rotationEndsAtMs, now) || e.rotationStartedAtMs === null || e.previousSignatureScheme === null) return undefined;
  return {
    $typeName: 'publishing.v1.SecretRotation',
    startedAt: timestampOf(e.rotationStartedAtMs),
    endsAt: timestampOf(e.rotationEndsAtMs!),
    previousSignatureScheme: e.previousSignatureScheme,
  };
}

/** What an endpoint does with its deliveries: a disabled one, even if it was paused before, sends nothing ever again. */
function endpointState(e: Pick<ListedEndpoint, 'disabledAtMs' | 'pausedAtMs'>): 'active' | 'paused' | 'disabled' {
  if (e.disabledAtMs !== null) return 'disabled';
  return e.pausedAtMs === null ? 'active' : 'paused';
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
