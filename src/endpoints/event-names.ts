import { apiError } from '../errors';

/**
 * Event names on an endpoint: `webhook.test`, or any name of the documented pattern
 * (dot-separated lowercase words, e.g. `post.held`), the types internal services publish,
 * so endpoints can subscribe ahead of new events. Published event types follow it too.
 */
export const DOCUMENTED_EVENTS = ['webhook.test'] as const;
export const EVENT_NAME_PATTERN = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/;
export const MAX_EVENT_NAME_LENGTH = 64;
export const MAX_EVENT_NAMES = 20;

export function normalizeEventNames(names: readonly string[]): string[] {
  if (names.length === 0) return [...DOCUMENTED_EVENTS];
  if (names.length > MAX_EVENT_NAMES) {
    throw apiError('TOO_MANY_EVENT_NAMES', `An endpoint takes at most ${MAX_EVENT_NAMES} event names.`);
  }
  for (const name of names) {
    if (name.length > MAX_EVENT_NAME_LENGTH || !EVENT_NAME_PATTERN.test(name)) {
      throw apiError(
        'EVENT_NAME_INVALID',
        `"${name.slice(0, MAX_EVENT_NAME_LENGTH)}" is not an event name: use dot-separated lowercase words such as "webhook.test".`,
      );
    }
  }
  return [...new Set(names)];
}
