export { EventPublisher, ChangeEvents, changeEventId, PLATFORM_PUBLISHER, type EventPublisherDeps, type NewEvent, type PublishedEvent, MAX_EVENTS_PER_CALL, MAX_EVENT_ID_LENGTH, MAX_PAYLOAD_BYTES, PLAN_EXCLUDES_WEBHOOKS } from './publisher';
export { EventServiceImpl } from './service';
export { expireEventPayloads, eraseEventPayloads } from './retention';
