export { EventPublisher, ChangeEvents, changeEventId, PLATFORM_PUBLISHER, type EventPublisherDeps } from './publisher';
export { MAX_EVENTS_PER_CALL, MAX_EVENT_ID_LENGTH, MAX_PAYLOAD_BYTES, type NewEvent, type PublishedEvent } from './event';
export { PLAN_EXCLUDES_WEBHOOKS } from './publish-statement';
export { EventServiceImpl } from './service';
