import { randomUUID } from 'node:crypto';
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

/**
 * Entities of the service. Foreign keys are plain uuid columns (constraints live in
 * the migration): every lookup filters by organization explicitly, and nothing is
 * loaded behind the caller's back.
 */

const id = () => p.uuid().primary().onCreate(() => randomUUID());
const timestamps = {
  createdAt: p.datetime().onCreate(() => new Date()),
  updatedAt: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
};

export const PLANS = ['starter', 'agency', 'scale', 'command', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

export const OrganizationSchema = defineEntity({
  name: 'Organization',
  tableName: 'organizations',
  properties: {
    id: id(),
    name: p.text(),
    plan: p.enum(PLANS),
    /** Enterprise only: deliveries per calendar month, set by an operator. */
    monthlyDeliveryQuota: p.bigint('number').nullable(),
    ...timestamps,
  },
});
export type Organization = InferEntity<typeof OrganizationSchema>;

export const ROLES = ['owner', 'admin', 'member', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

export const UserSchema = defineEntity({
  name: 'User',
  tableName: 'users',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    email: p.text(),
    role: p.enum(ROLES),
    ...timestamps,
  },
});
export type User = InferEntity<typeof UserSchema>;

export const ApiKeySchema = defineEntity({
  name: 'ApiKey',
  tableName: 'api_keys',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    userId: p.uuid(),
    name: p.text(),
    /** First characters of the key, safe to show so people can tell keys apart. */
    prefix: p.text(),
    /** SHA-256 of the whole key; the key itself is shown once and never stored. */
    keyHash: p.text(),
    scopes: p.array(),
    revokedAt: p.datetime().nullable(),
    lastUsedAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type ApiKey = InferEntity<typeof ApiKeySchema>;

export const CONNECTION_STATUSES = ['connected', 'verified', 'held', 'disconnected'] as const;
export type ConnectionStatus = (typeof CONNECTION_STATUSES)[number];

export const ConnectionSchema = defineEntity({
  name: 'Connection',
  tableName: 'connections',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    toolkit: p.text(),
    status: p.enum(CONNECTION_STATUSES),
    /** The provider's reference of the connected account; the provider holds the credentials. */
    connectedAccountRef: p.text(),
    accountId: p.text(),
    accountKind: p.text(),
    displayName: p.text(),
    handle: p.text(),
    avatarUrl: p.text(),
    /** Account id of the identity last confirmed; a different one needs an owner or admin. */
    confirmedAccountId: p.text().nullable(),
    verifiedAt: p.datetime().nullable(),
    disconnectedAt: p.datetime().nullable(),
    disableReason: p.text().nullable(),
    ...timestamps,
  },
});
export type Connection = InferEntity<typeof ConnectionSchema>;

export const ConnectionAttemptSchema = defineEntity({
  name: 'ConnectionAttempt',
  tableName: 'connection_attempts',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    userId: p.uuid(),
    toolkit: p.text(),
    /** Set when the attempt reconnects an existing destination. */
    connectionId: p.uuid().nullable(),
    expiresAt: p.datetime(),
    completedAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type ConnectionAttempt = InferEntity<typeof ConnectionAttemptSchema>;

export const POST_STATUSES = ['scheduled', 'held'] as const;
export type PostStatus = (typeof POST_STATUSES)[number];

export const PostSchema = defineEntity({
  name: 'Post',
  tableName: 'posts',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    connectionId: p.uuid(),
    text: p.text(),
    scheduledAt: p.datetime(),
    status: p.enum(POST_STATUSES),
    holdReason: p.text().nullable(),
    heldAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type Post = InferEntity<typeof PostSchema>;

/** How an endpoint's deliveries are signed (README "Signing schemes and rotation"). */
export const SIGNATURE_SCHEMES = ['legacy', 'standard', 'both'] as const;
export type SignatureScheme = (typeof SIGNATURE_SCHEMES)[number];

export const WebhookEndpointSchema = defineEntity({
  name: 'WebhookEndpoint',
  tableName: 'webhook_endpoints',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    url: p.text(),
    description: p.text(),
    eventNames: p.array(),
    /** Id of the key that encrypted the signing secret, for rotation. */
    secretKeyId: p.text(),
    /** AES-256-GCM: nonce, ciphertext and tag of the whsec_ secret. */
    secretCiphertext: p.blob(),
    signatureScheme: p.enum(SIGNATURE_SCHEMES).default('legacy'),
    /** The secret before the last rotation, sealed like the current one; it signs until rotationEndsAt. */
    previousSecretKeyId: p.text().nullable(),
    previousSecretCiphertext: p.blob().nullable(),
    previousSignatureScheme: p.enum(SIGNATURE_SCHEMES).nullable(),
    rotationStartedAt: p.datetime().nullable(),
    rotationEndsAt: p.datetime().nullable(),
    disabledAt: p.datetime().nullable(),
    /** Set while the endpoint is paused: its deliveries are held, not sent. */
    pausedAt: p.datetime().nullable(),
    /** Who paused it: 'customer', or 'failing' when the service did because its deliveries kept failing. */
    pauseReason: p.text().nullable(),
    /** An automatic pause: when the failures that led to it began. */
    failingSince: p.datetime().nullable(),
    /** The last resume; failures before it do not count towards an automatic pause. */
    resumedAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type WebhookEndpoint = InferEntity<typeof WebhookEndpointSchema>;

export const DELIVERY_STATUSES = ['pending', 'retrying', 'held', 'delivered', 'dead_lettered', 'failed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** Why a delivery's payload is no longer stored (README "Retention and erasure"). */
export const PAYLOAD_REMOVALS = ['expired', 'erased'] as const;
export type PayloadRemoval = (typeof PAYLOAD_REMOVALS)[number];

export const WebhookDeliverySchema = defineEntity({
  name: 'WebhookDelivery',
  tableName: 'webhook_deliveries',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    endpointId: p.uuid(),
    eventId: p.text(),
    eventType: p.text(),
    /** The exact JSON body that is signed and sent on every attempt. */
    payload: p.text(),
    status: p.enum(DELIVERY_STATUSES),
    attemptCount: p.integer(),
    nextAttemptAt: p.datetime().nullable(),
    lastError: p.text().nullable(),
    lastResponseStatus: p.integer().nullable(),
    workflowId: p.text(),
    /** Embedded engine: the instance working on the delivery holds it until then, renewing as it works. */
    leaseUntil: p.datetime().nullable(),
    /** Embedded engine: which instance holds the lease. */
    leaseOwner: p.text().nullable(),
    deliveredAt: p.datetime().nullable(),
    /** The series of attempts the delivery is in: 1, and one more for each resend. */
    series: p.integer(),
    /** Why the payload is gone (then empty): kept past its retention, or erased on request; null while kept. */
    payloadRemoved: p.enum(PAYLOAD_REMOVALS).nullable(),
    payloadRemovedAt: p.datetime().nullable(),
    /** The series the endpoint statistics' roll-up counted the delivery with (src/delivery/statistics.ts); null until then. */
    statisticsSeries: p.integer().nullable(),
    /** The final status it was counted in. */
    statisticsStatus: p.enum(['delivered', 'dead_lettered', 'failed'] as const).nullable(),
    ...timestamps,
  },
});
export type WebhookDelivery = InferEntity<typeof WebhookDeliverySchema>;

/**
 * One endpoint's finished deliveries created in one hour, rolled up by the statistics pass
 * (src/delivery/statistics.ts owns the table; its migration says what each column holds).
 */
export const EndpointStatisticsHourSchema = defineEntity({
  name: 'EndpointStatisticsHour',
  tableName: 'endpoint_statistics_hours',
  properties: {
    endpointId: p.uuid().primary(),
    hour: p.datetime().primary(),
    delivered: p.integer(),
    deadLettered: p.integer(),
    failed: p.integer(),
    attempts: p.integer(),
    /** Answered attempts by response time, 64 log-spaced buckets. */
    responseMsBuckets: p.array<number>().columnType('int[]'),
    lastFailureAt: p.datetime().nullable(),
    lastFailureDeliveryId: p.uuid().nullable(),
    lastFailureStatus: p.integer().nullable(),
    lastFailureError: p.text().nullable(),
  },
});
export type EndpointStatisticsHour = InferEntity<typeof EndpointStatisticsHourSchema>;

/** Kinds of attempt failure, as the delivery log shows them. */
export const ATTEMPT_ERROR_CLASSES = ['http_status', 'timeout', 'tls', 'dns', 'connection', 'address_refused', 'invalid_url', 'interrupted'] as const;
export type AttemptErrorClass = (typeof ATTEMPT_ERROR_CLASSES)[number];

/** Characters of a receiver's answer kept with an attempt (the column's check says the same). */
export const RESPONSE_EXCERPT_LENGTH = 1024;

/**
 * One attempt of a delivery. The row is written before anything leaves; `dispatchedAt`
 * is set once the connection to the receiver stands and just before the request is
 * written, so an attempt that never got that far (the process died while connecting)
 * is not counted and its number is used again.
 */
export const DeliveryAttemptSchema = defineEntity({
  name: 'DeliveryAttempt',
  tableName: 'delivery_attempts',
  properties: {
    deliveryId: p.uuid().primary(),
    /** Attempts are numbered 1 to 8 within their series (a resend starts a new one). */
    series: p.integer().primary(),
    attempt: p.integer().primary(),
    startedAt: p.datetime(),
    dispatchedAt: p.datetime().nullable(),
    finishedAt: p.datetime().nullable(),
    responseStatus: p.integer().nullable(),
    error: p.text().nullable(),
    /** Why a failed attempt failed, by kind (ATTEMPT_ERROR_CLASSES). */
    errorClass: p.enum(ATTEMPT_ERROR_CLASSES).nullable(),
    /** The start of the receiver's answer, at most RESPONSE_EXCERPT_LENGTH characters. */
    responseExcerpt: p.text().nullable(),
    retryAfterSeconds: p.integer().nullable(),
  },
});
export type DeliveryAttempt = InferEntity<typeof DeliveryAttemptSchema>;

/** The dead-letter queue: deliveries that used all their attempts. */
export const DeadLetterSchema = defineEntity({
  name: 'DeadLetter',
  tableName: 'dead_letters',
  properties: {
    deliveryId: p.uuid().primary(),
    organizationId: p.uuid(),
    endpointId: p.uuid(),
    lastError: p.text().nullable(),
    createdAt: p.datetime(),
  },
});
export type DeadLetter = InferEntity<typeof DeadLetterSchema>;

/** An operator's kill switch: scope is 'global' or an organization id. */
export const KillSwitchSchema = defineEntity({
  name: 'KillSwitch',
  tableName: 'kill_switches',
  properties: {
    scope: p.text().primary(),
    enabled: p.boolean(),
    reason: p.text(),
    updatedAt: p.datetime(),
  },
});
export type KillSwitch = InferEntity<typeof KillSwitchSchema>;

/** Deliveries counted against an organization's monthly quota. */
export const DeliveryUsageSchema = defineEntity({
  name: 'DeliveryUsage',
  tableName: 'delivery_usage',
  properties: {
    organizationId: p.uuid().primary(),
    /** First day of the calendar month (UTC). */
    month: p.date().primary(),
    deliveries: p.bigint('number'),
  },
});
export type DeliveryUsage = InferEntity<typeof DeliveryUsageSchema>;

/** rate-limiter-flexible's counters, in the shape its PostgreSQL store requires. */
export const RateLimitSchema = defineEntity({
  name: 'RateLimit',
  tableName: 'rate_limits',
  properties: {
    key: p.string().length(255).primary(),
    points: p.integer(),
    expire: p.bigint('number').nullable(),
  },
});
export type RateLimit = InferEntity<typeof RateLimitSchema>;

/**
 * An event an internal service published (EventService). (organization, event id) is
 * unique: a producer's retry finds the event it recorded before instead of a second one.
 */
export const EventSchema = defineEntity({
  name: 'Event',
  tableName: 'events',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    /** The producer's id, the idempotency key and the delivered body's "id". */
    eventId: p.text(),
    eventType: p.text(),
    /** The delivered body's "data"; compared as JSON when the same id is published again. */
    payload: p.json<Record<string, unknown>>(),
    occurredAt: p.datetime(),
    /** Name of the internal service credential that published it. */
    publisher: p.text(),
    /** Why the event got no deliveries by rule (PLAN_EXCLUDES_WEBHOOKS); null otherwise. */
    skippedReason: p.text().nullable(),
    /** Why the payload is gone (then `{}`): past its retention, or erased on request; null while kept. */
    payloadRemoved: p.enum(PAYLOAD_REMOVALS).nullable(),
    payloadRemovedAt: p.datetime().nullable(),
    createdAt: p.datetime(),
  },
});
export type Event = InferEntity<typeof EventSchema>;

export const RECOVERY_STATES = ['queued', 'running', 'finished', 'stopped'] as const;
export type RecoveryState = (typeof RECOVERY_STATES)[number];

/**
 * A recovery job: resends an endpoint's dead-lettered and failed deliveries of a window,
 * paced, in the background. The cursor (afterCreatedAt, afterId) is how far it got, so a
 * restarted service goes on where it stopped and resends nothing twice.
 */
export const RecoveryJobSchema = defineEntity({
  name: 'RecoveryJob',
  tableName: 'recovery_jobs',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    endpointId: p.uuid(),
    since: p.datetime(),
    until: p.datetime(),
    /** The until the request gave (null: none, so now); the window's identity. */
    requestedUntil: p.datetime().nullable(),
    state: p.enum(RECOVERY_STATES),
    found: p.integer(),
    resent: p.integer(),
    stoppedReason: p.text().nullable(),
    afterCreatedAt: p.datetime().nullable(),
    afterId: p.uuid().nullable(),
    /** When the next paced batch may go out. */
    nextBatchAt: p.datetime(),
    /** user:<id> or operator. */
    requestedBy: p.text(),
    createdAt: p.datetime(),
    startedAt: p.datetime().nullable(),
    finishedAt: p.datetime().nullable(),
    updatedAt: p.datetime(),
  },
});
export type RecoveryJob = InferEntity<typeof RecoveryJobSchema>;

export const AUDIT_OUTCOMES = ['succeeded', 'refused', 'failed'] as const;
export type AuditOutcome = (typeof AUDIT_OUTCOMES)[number];

/** The append-only audit trail. */
export const AuditEventSchema = defineEntity({
  name: 'AuditEvent',
  tableName: 'audit_events',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    occurredAt: p.datetime(),
    organizationId: p.uuid().nullable(),
    actorUserId: p.uuid().nullable(),
    apiKeyId: p.uuid().nullable(),
    action: p.text(),
    targetId: p.text().nullable(),
    outcome: p.enum(AUDIT_OUTCOMES),
    reason: p.text().nullable(),
    requestId: p.text().nullable(),
    details: p.json<Record<string, unknown>>(),
    /** The portal session that acted, when one did (no user or key then). */
    portalSessionId: p.uuid().nullable(),
  },
});
export type AuditEvent = InferEntity<typeof AuditEventSchema>;

/**
 * Scoped, short-lived access to the customer portal for one organization. The token is
 * exchanged once for a cookie; only the SHA-256 of each is kept.
 */
export const PortalSessionSchema = defineEntity({
  name: 'PortalSession',
  tableName: 'portal_sessions',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    tokenHash: p.text(),
    cookieHash: p.text().nullable(),
    capabilities: p.array(),
    /** Null: every endpoint of the organization. */
    endpointIds: p.array().nullable(),
    createdBy: p.text(),
    createdAt: p.datetime().onCreate(() => new Date()),
    expiresAt: p.datetime(),
    exchangedAt: p.datetime().nullable(),
    revokedAt: p.datetime().nullable(),
  },
});
export type PortalSession = InferEntity<typeof PortalSessionSchema>;

export const ENTITIES = [
  OrganizationSchema,
  UserSchema,
  ApiKeySchema,
  ConnectionSchema,
  ConnectionAttemptSchema,
  PostSchema,
  WebhookEndpointSchema,
  WebhookDeliverySchema,
  EndpointStatisticsHourSchema,
  DeliveryAttemptSchema,
  DeadLetterSchema,
  KillSwitchSchema,
  DeliveryUsageSchema,
  RateLimitSchema,
  AuditEventSchema,
  EventSchema,
  RecoveryJobSchema,
  PortalSessionSchema,
];
