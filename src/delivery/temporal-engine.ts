import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
} from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import type { deliverWebhook } from '../../workflows/delivery';
import type { DeliveryEngine, DeliveryMeta, DeliveryRef } from './contract';
import { workflowIdFor } from './workflow-id';

/**
 * Keyword search attributes operators filter deliveries by. They must exist on the
 * namespace before the first start with `searchAttributes: true`, otherwise the start fails:
 *
 *   temporal operator search-attribute create --namespace <ns> \
 *     --name OrganizationId --type Keyword \
 *     --name EndpointId --type Keyword \
 *     --name EventId --type Keyword
 */
export const DELIVERY_SEARCH_ATTRIBUTES = {
  organizationId: defineSearchAttributeKey('OrganizationId', SearchAttributeType.KEYWORD),
  endpointId: defineSearchAttributeKey('EndpointId', SearchAttributeType.KEYWORD),
  eventId: defineSearchAttributeKey('EventId', SearchAttributeType.KEYWORD),
};

export interface TemporalDeliveryEngineOptions {
  /** Owned by the caller, who closes its connection. */
  client: Client;
  taskQueue: string;
  /** Set only once the attributes in DELIVERY_SEARCH_ATTRIBUTES are registered on the namespace. */
  searchAttributes?: boolean;
}

/** Runs each delivery as a `deliverWebhook` workflow. */
export class TemporalDeliveryEngine implements DeliveryEngine {
  constructor(private readonly options: TemporalDeliveryEngineOptions) {}

  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<{ workflowId: string }> {
    const workflowId = workflowIdFor(ref);
    try {
      await this.options.client.workflow.start<typeof deliverWebhook>('deliverWebhook', {
        workflowId,
        taskQueue: this.options.taskQueue,
        args: [ref],
        // A delivery runs once per (endpoint, event): never beside a running one, never again after it closed.
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.FAIL,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        memo: {
          organizationId: ref.organizationId,
          endpointId: ref.endpointId,
          eventId: ref.eventId,
          eventType: meta.eventType,
          targetHost: meta.targetHost,
        },
        ...(this.options.searchAttributes && { typedSearchAttributes: searchAttributesFor(ref) }),
      });
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    return { workflowId };
  }

  /** Nothing to release: the client and its connection belong to the caller. */
  async close(): Promise<void> {}
}

function searchAttributesFor(ref: DeliveryRef): SearchAttributePair[] {
  return [
    { key: DELIVERY_SEARCH_ATTRIBUTES.organizationId, value: ref.organizationId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.endpointId, value: ref.endpointId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.eventId, value: ref.eventId },
  ];
}

/** A client for the engine; the caller owns it and calls `close` at shutdown. */
export async function createTemporalClient(options: {
  address: string;
  namespace: string;
}): Promise<{ client: Client; close: () => Promise<void> }> {
  const connection = await Connection.connect({ address: options.address });
  const client = new Client({ connection, namespace: options.namespace });
  return { client, close: () => connection.close() };
}
