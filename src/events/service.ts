import { timestampDate, timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type {
  EventDelivery as EventDeliveryMessage,
  EventService,
  PublishEventRequest,
  PublishEventsRequest,
  PublishedEvent as PublishedEventMessage,
} from '../gen/publishing/internal/v1/event_service_pb';
import { requireInternalService } from '../auth';
import { entityManagerOf } from '../db';
import { apiError } from '../errors';
import { MAX_EVENTS_PER_CALL, type NewEvent, type PublishedEvent } from './event';
import type { EventPublisher } from './publisher';

/** publishing.internal.v1.EventService; the auth interceptor admits internal service credentials only. */
export class EventServiceImpl implements ServiceImpl<typeof EventService> {
  constructor(private readonly publisher: EventPublisher) {}

  async publishEvent(req: PublishEventRequest, ctx: HandlerContext) {
    const caller = requireInternalService(ctx);
    const [event] = await this.publisher.publish(entityManagerOf(ctx), [newEvent(req)], caller.name);
    return { event: eventMessage(event!) };
  }

  async publishEvents(req: PublishEventsRequest, ctx: HandlerContext) {
    const caller = requireInternalService(ctx);
    if (req.events.length === 0 || req.events.length > MAX_EVENTS_PER_CALL) {
      throw apiError('TOO_MANY_EVENTS', `Send 1 to ${MAX_EVENTS_PER_CALL} events per call (got ${req.events.length}).`);
    }
    const events = await this.publisher.publish(entityManagerOf(ctx), req.events.map(newEvent), caller.name);
    return { events: events.map(eventMessage) };
  }
}

function newEvent(req: PublishEventRequest): NewEvent {
  return {
    organizationId: req.organizationId,
    eventId: req.eventId,
    eventType: req.eventType,
    payload: req.payload,
    occurredAt: req.occurredAt ? timestampDate(req.occurredAt) : undefined,
  };
}

/**
 * Message literals, not create(): create() copies every field of its init, and a publish
 * answers with a message per subscribed endpoint. Every field is set, as create() would.
 */
function eventMessage(event: PublishedEvent): PublishedEventMessage {
  return {
    $typeName: 'publishing.internal.v1.PublishedEvent',
    organizationId: event.organizationId,
    eventId: event.eventId,
    eventType: event.eventType,
    occurredAt: timestampFromDate(event.occurredAt),
    recordedAt: timestampFromDate(event.recordedAt),
    publisher: event.publisher,
    replayed: event.replayed,
    skippedReason: event.skippedReason ?? '',
    deliveries: event.deliveries.map(
      (d): EventDeliveryMessage => ({
        $typeName: 'publishing.internal.v1.EventDelivery',
        deliveryId: d.id,
        endpointId: d.endpointId,
        workflowId: d.workflowId,
        status: d.status,
        lastError: d.lastError ?? '',
      }),
    ),
  };
}
