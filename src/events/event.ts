import type { JsonObject } from '@bufbuild/protobuf';
import type { EventDelivery } from '../delivery';
import { EVENT_NAME_PATTERN, MAX_EVENT_NAME_LENGTH } from '../endpoints';
import { apiError } from '../errors';

/** Limits of the contract the README documents (Internal event service). */
export const MAX_EVENTS_PER_CALL = 100;
export const MAX_PAYLOAD_BYTES = 256 * 1024;
export const MAX_EVENT_ID_LENGTH = 128;
/** Letters, digits and `. _ : -`, starting with a letter or digit: safe in logs, URLs and workflow ids. */
export const EVENT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
/** Emitted by the test route only, so a receiver can tell a test from a real event. */
export const RESERVED_EVENT_TYPES: readonly string[] = ['webhook.test'];

/** An event as a producer hands it over. */
export interface NewEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  /** The delivered body's `data`; absent means {}. */
  payload?: JsonObject;
  /** Absent means when it is recorded. */
  occurredAt?: Date;
  /** An endpoint of the organization not sent the event: the one a platform event is about (it was just paused, say). */
  exceptEndpointId?: string;
}

/** An event as recorded, with its deliveries. */
export interface PublishedEvent {
  organizationId: string;
  eventId: string;
  eventType: string;
  occurredAt: Date;
  recordedAt: Date;
  publisher: string;
  skippedReason: string | null;
  /** True when the event was recorded before and this publish recorded nothing. */
  replayed: boolean;
  deliveries: EventDelivery[];
}

/** The delivered body: the same bytes as JSON.stringify of { id, type, createdAt, data }, without serialising the payload again. */
export function bodyOf(event: CheckedEvent, now: Date): string {
  return `{"id":${JSON.stringify(event.eventId)},"type":${JSON.stringify(event.eventType)},"createdAt":${JSON.stringify((event.occurredAt ?? now).toISOString())},"data":${event.payloadJson}}`;
}

export interface CheckedEvent extends NewEvent {
  payload: JsonObject;
  payloadJson: string;
}

/** Refuses what no retry could fix, before anything is written; `index` names the event in a batch. */
export function checkEvent(event: NewEvent, index: number): CheckedEvent {
  const refuse = (code: Parameters<typeof apiError>[0], message: string) => apiError(code, message, { metadata: { index: String(index) } });
  if (event.eventId.length === 0 || event.eventId.length > MAX_EVENT_ID_LENGTH || !EVENT_ID_PATTERN.test(event.eventId)) {
    throw refuse(
      'EVENT_ID_INVALID',
      `An event id is 1 to ${MAX_EVENT_ID_LENGTH} letters, digits, ".", "_", ":" or "-", starting with a letter or digit.`,
    );
  }
  if (event.eventType.length > MAX_EVENT_NAME_LENGTH || !EVENT_NAME_PATTERN.test(event.eventType)) {
    throw refuse('EVENT_TYPE_INVALID', `"${event.eventType.slice(0, MAX_EVENT_NAME_LENGTH)}" is not an event type: use dot-separated lowercase words such as "post.held".`);
  }
  if (RESERVED_EVENT_TYPES.includes(event.eventType)) {
    throw refuse('EVENT_TYPE_RESERVED', `${event.eventType} is sent by the test route only.`);
  }
  const payload = event.payload ?? {};
  const payloadJson = JSON.stringify(payload);
  if (Buffer.byteLength(payloadJson) > MAX_PAYLOAD_BYTES) {
    throw refuse('EVENT_PAYLOAD_TOO_LARGE', `The payload must be at most ${MAX_PAYLOAD_BYTES} bytes as JSON.`);
  }
  return { ...event, payload, payloadJson };
}

