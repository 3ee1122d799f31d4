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

export const DESTINATION_STATUSES = ['connected', 'verified', 'held', 'disconnected'] as const;
export type DestinationStatus = (typeof DESTINATION_STATUSES)[number];

export const DestinationSchema = defineEntity({
  name: 'Destination',
  tableName: 'destinations',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    toolkit: p.text(),
    status: p.enum(DESTINATION_STATUSES),
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
export type Destination = InferEntity<typeof DestinationSchema>;

export const ConnectionAttemptSchema = defineEntity({
  name: 'ConnectionAttempt',
  tableName: 'connection_attempts',
  properties: {
    id: id(),
    organizationId: p.uuid(),
    userId: p.uuid(),
    toolkit: p.text(),
    /** Set when the attempt reconnects an existing destination. */
    destinationId: p.uuid().nullable(),
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
    destinationId: p.uuid(),
    text: p.text(),
    scheduledAt: p.datetime(),
    status: p.enum(POST_STATUSES),
    holdReason: p.text().nullable(),
    heldAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type Post = InferEntity<typeof PostSchema>;

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
    disabledAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type WebhookEndpoint = InferEntity<typeof WebhookEndpointSchema>;

export const DELIVERY_STATUSES = ['pending', 'retrying', 'held', 'delivered', 'dead_lettered', 'failed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

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
    /** Embedded engine: an instance working on the delivery holds it until then. */
    leaseUntil: p.datetime().nullable(),
    deliveredAt: p.datetime().nullable(),
    ...timestamps,
  },
});
export type WebhookDelivery = InferEntity<typeof WebhookDeliverySchema>;

export const ENTITIES = [
  OrganizationSchema,
  UserSchema,
  ApiKeySchema,
  DestinationSchema,
  ConnectionAttemptSchema,
  PostSchema,
  WebhookEndpointSchema,
  WebhookDeliverySchema,
];
