/**
 * The event catalog: every event type a customer can subscribe an endpoint to, with a JSON
 * Schema of the `data` of its delivered body and an example. The README's catalog and the
 * portal's are read from here, and test/webhooks/event-catalog.test.ts validates the bodies
 * the service actually delivers against these schemas, so the three cannot drift apart.
 */

export interface EventTypeEntry {
  name: string;
  description: string;
  /** JSON Schema (draft 2020-12) of the delivered body's `data`. */
  schema: Record<string, unknown>;
  /** An example `data`, valid against the schema. */
  example: Record<string, unknown>;
}

const id = { type: 'string', minLength: 1 };
const instant = { type: 'string', format: 'date-time' };
const count = { type: 'integer', minimum: 0 };

function object(description: string, properties: Record<string, Record<string, unknown>>, optional: readonly string[] = []): Record<string, unknown> {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    description,
    type: 'object',
    properties,
    required: Object.keys(properties).filter((name) => !optional.includes(name)),
    additionalProperties: false,
  };
}

const ORG_EXAMPLE_CONNECTION = '0b6f2c4e-7d1a-4c55-9a9e-2f1d8e6b3c10';
const ENDPOINT_EXAMPLE = '5f0c9a3e-1b2d-4e8f-a7c6-9d3e2b1a0f4c';

export const EVENT_CATALOG: readonly EventTypeEntry[] = [
  {
    name: 'connection.disconnected',
    description: 'A destination was disabled; its scheduled posts are held.',
    schema: object('The disabled destination and how many posts it held.', {
      connectionId: id,
      toolkit: id,
      accountId: id,
      reason: { type: 'string' },
      disconnectedAt: instant,
      heldPosts: count,
    }),
    example: {
      connectionId: ORG_EXAMPLE_CONNECTION,
      toolkit: 'linkedin',
      accountId: 'acct_81724',
      reason: 'Account handed over to the new agency',
      disconnectedAt: '2026-11-21T10:00:00.000Z',
      heldPosts: 3,
    },
  },
  {
    name: 'connection.held',
    description: 'A reconnect returned a different account; the destination and its scheduled posts wait for re-review.',
    schema: object('The destination, the account it had and the one it has now.', {
      connectionId: id,
      toolkit: id,
      previousAccountId: id,
      accountId: id,
      heldPosts: count,
    }),
    example: { connectionId: ORG_EXAMPLE_CONNECTION, toolkit: 'instagram', previousAccountId: 'acct_81724', accountId: 'acct_99310', heldPosts: 2 },
  },
  {
    name: 'connection.verified',
    description: "A connections manager confirmed a destination's identity; it may receive posts.",
    schema: object('The verified destination and the identity confirmed.', {
      connectionId: id,
      toolkit: id,
      accountId: id,
      displayName: { type: 'string' },
      handle: { type: 'string' },
      verifiedAt: instant,
    }),
    example: {
      connectionId: ORG_EXAMPLE_CONNECTION,
      toolkit: 'linkedin',
      accountId: 'acct_81724',
      displayName: 'Harbour Coffee',
      handle: '@harbourcoffee',
      verifiedAt: '2026-11-21T10:00:00.000Z',
    },
  },
  {
    name: 'post.held',
    description: "A scheduled post was held: its destination was disabled or now answers as another account.",
    schema: object('The held post.', {
      postId: id,
      connectionId: id,
      scheduledAt: instant,
      holdReason: { type: 'string', enum: ['connection_disabled', 'account_changed'] },
    }),
    example: {
      postId: '9a1e7c52-3f4b-4d2a-8e6f-0c1b2d3e4f5a',
      connectionId: ORG_EXAMPLE_CONNECTION,
      scheduledAt: '2026-11-22T09:30:00.000Z',
      holdReason: 'connection_disabled',
    },
  },
  {
    name: 'post.released',
    description: 'A held post was released and is scheduled again.',
    schema: object('The released post.', { postId: id, connectionId: id, scheduledAt: instant }),
    example: { postId: '9a1e7c52-3f4b-4d2a-8e6f-0c1b2d3e4f5a', connectionId: ORG_EXAMPLE_CONNECTION, scheduledAt: '2026-11-22T09:30:00.000Z' },
  },
  {
    name: 'webhook.endpoint.paused',
    description: "One of the organization's other endpoints was paused (an endpoint is never told of its own pause).",
    schema: object(
      'The paused endpoint; paused by the service after failing, also why, since when, and whether it answered 410 Gone.',
      {
        endpointId: id,
        url: { type: 'string', format: 'uri' },
        pausedAt: instant,
        reason: { type: 'string', enum: ['failing'] },
        failingSince: instant,
        gone: { type: 'boolean' },
      },
      ['reason', 'failingSince', 'gone'],
    ),
    example: { endpointId: ENDPOINT_EXAMPLE, url: 'https://hooks.example.com/publishing', pausedAt: '2026-11-21T10:00:00.000Z' },
  },
  {
    name: 'webhook.endpoint.resumed',
    description: "One of the organization's other endpoints was resumed; its held deliveries go out.",
    schema: object(
      'The resumed endpoint; lifted by a delivered test, also why.',
      { endpointId: id, url: { type: 'string', format: 'uri' }, resumedAt: instant, reason: { type: 'string', enum: ['test_delivered'] } },
      ['reason'],
    ),
    example: { endpointId: ENDPOINT_EXAMPLE, url: 'https://hooks.example.com/publishing', resumedAt: '2026-11-21T11:00:00.000Z' },
  },
  {
    name: 'webhook.recovery.finished',
    description: 'A recovery job ended: every delivery of its window was resent, or it stopped.',
    schema: object('The job, its window and what it resent.', {
      recoveryId: id,
      endpointId: id,
      state: { type: 'string', enum: ['finished', 'stopped'] },
      since: instant,
      until: instant,
      found: count,
      resent: count,
      stoppedReason: { type: ['string', 'null'] },
      finishedAt: instant,
    }),
    example: {
      recoveryId: '3c2b1a0f-4e5d-4c6b-8a79-1f2e3d4c5b6a',
      endpointId: ENDPOINT_EXAMPLE,
      state: 'finished',
      since: '2026-11-20T08:00:00.000Z',
      until: '2026-11-20T12:00:00.000Z',
      found: 42,
      resent: 42,
      stoppedReason: null,
      finishedAt: '2026-11-21T10:00:05.000Z',
    },
  },
  {
    name: 'webhook.test',
    description: 'Sent by the test route (TestWebhook) to check that an endpoint receives and verifies deliveries.',
    schema: object('The endpoint tested.', { endpointId: id, message: { type: 'string' } }),
    example: { endpointId: ENDPOINT_EXAMPLE, message: 'This is a test delivery from the publishing platform.' },
  },
];
