import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
} from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import type { deliverWebhook } from '../../workflows/delivery';
import { RELEASE_SIGNAL, RETRY_INTERVAL_MS } from '../../workflows/policy';
import type { TemporalConfig } from '../config';
import type { DeliveryEngine, DeliveryMeta, DeliveryRef } from './contract';
import { temporalConnectionOptions } from './temporal-connection';
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
  /** The interval between attempts; the workflow is told only when it is not the contract's 30 s (test configuration). */
  retryIntervalMs?: number;
}

/** How long a start may wait for Temporal before the delivery is left to the pending sweep. */
const START_DEADLINE_MS = 2_000;

/** Runs each delivery as a `deliverWebhook` workflow. */
export class TemporalDeliveryEngine implements DeliveryEngine {
  constructor(private readonly options: TemporalDeliveryEngineOptions) {}

  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<{ workflowId: string }> {
    const workflowId = workflowIdFor(ref, meta.series);
    // A caller waits for the start (the row is committed already): when Temporal does not
    // answer quickly, the delivery stays pending for the sweep rather than hold the call.
    const deadline = Date.now() + START_DEADLINE_MS;
    try {
      await this.options.client.connection.withDeadline(deadline, () => this.options.client.workflow.start<typeof deliverWebhook>('deliverWebhook', {
        workflowId,
        taskQueue: this.options.taskQueue,
        args: this.options.retryIntervalMs === undefined || this.options.retryIntervalMs === RETRY_INTERVAL_MS ? [ref] : [ref, { sent: 0, retryIntervalMs: this.options.retryIntervalMs }],
        // A series of a delivery runs once: never beside a running one, never again after it closed.
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.FAIL,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        memo: {
          organizationId: ref.organizationId,
          endpointId: ref.endpointId,
          eventId: ref.eventId,
          eventType: meta.eventType,
          targetHost: meta.targetHost,
          // A resend's series only: a first series' memo stays as it always was.
          ...(meta.series && meta.series > 1 && { series: meta.series }),
        },
        ...(this.options.searchAttributes && { typedSearchAttributes: searchAttributesFor(ref) }),
      }));
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    return { workflowId };
  }

  /**
   * Wakes each released delivery's workflow, which otherwise would sleep out the rest of
   * its interval. A workflow that has finished (or not started yet) has nothing to wake.
   */
  async release(released: { workflowId: string }[]): Promise<void> {
    const queue = [...released];
    const signalNext = async (): Promise<void> => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        try {
          await this.options.client.workflow.getHandle(next.workflowId).signal(RELEASE_SIGNAL);
        } catch (error) {
          if (!(error instanceof WorkflowNotFoundError)) throw error;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(16, queue.length) }, signalNext));
  }

  /** Nothing to close: the client and its connection belong to the caller. */
  async close(): Promise<void> {}
}

function searchAttributesFor(ref: DeliveryRef): SearchAttributePair[] {
  return [
    { key: DELIVERY_SEARCH_ATTRIBUTES.organizationId, value: ref.organizationId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.endpointId, value: ref.endpointId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.eventId, value: ref.eventId },
  ];
}

/**
 * A client for the engine; the caller owns it and calls `close` at shutdown. The
 * connection is lazy: the API starts and serves while Temporal is unreachable (deliveries
 * wait as pending rows, which the sweep starts once it answers), and `reachable` says
 * whether it answers now, for /readyz and the metrics.
 */
export function createTemporalClient(options: TemporalConfig): { client: Client; reachable: () => Promise<boolean>; close: () => Promise<void> } {
  const connection = Connection.lazy({ ...temporalConnectionOptions(options), connectTimeout: 2_000 });
  const client = new Client({ connection, namespace: options.namespace });
  return {
    client,
    async reachable() {
      try {
        await connection.withDeadline(Date.now() + 2_000, () => connection.healthService.check({}));
        return true;
      } catch {
        return false;
      }
    },
    close: () => connection.close(),
  };
}
