import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
} from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import { temporalClientInterceptors } from '../tracing';
import type { deliverWebhook } from '../../workflows/delivery';
import { OUTCOME_ATTRIBUTES, RELEASE_SIGNAL, RETRY_INTERVAL_MS } from '../../workflows/policy';
import type { TemporalConfig } from '../config';
import type { DeliveryEngine, DeliveryMeta, DeliveryRef } from './contract';
import { temporalConnectionOptions } from './temporal-connection';
import { workflowIdFor } from './workflow-id';
import { WorkflowStarts, type StartOutcome } from './workflow-starts';
import type { Logger } from '../config';

/**
 * Keyword search attributes operators filter deliveries by. They must exist on the
 * namespace before the first start with `searchAttributes: true`, otherwise the start fails:
 *
 *   temporal operator search-attribute create --namespace <ns> \
 *     --name OrganizationId --type Keyword \
 *     --name EndpointId --type Keyword \
 *     --name EventId --type Keyword \
 *     --name DeliveryOutcome --type Keyword \
 *     --name DeliveryAttempts --type Int
 *
 * DeliveryOutcome and DeliveryAttempts start as `sending` and 0; the workflow keeps them
 * current (workflows/outcome.ts).
 */
export const DELIVERY_SEARCH_ATTRIBUTES = {
  organizationId: defineSearchAttributeKey('OrganizationId', SearchAttributeType.KEYWORD),
  endpointId: defineSearchAttributeKey('EndpointId', SearchAttributeType.KEYWORD),
  eventId: defineSearchAttributeKey('EventId', SearchAttributeType.KEYWORD),
  outcome: defineSearchAttributeKey(OUTCOME_ATTRIBUTES.outcome, SearchAttributeType.KEYWORD),
  attempts: defineSearchAttributeKey(OUTCOME_ATTRIBUTES.attempts, SearchAttributeType.INT),
};

export interface TemporalDeliveryEngineOptions {
  /** Owned by the caller, who closes its connection. */
  client: Client;
  taskQueue: string;
  /** Set only once the attributes in DELIVERY_SEARCH_ATTRIBUTES are registered on the namespace. */
  searchAttributes?: boolean;
  /** The interval between attempts; the workflow is told only when it is not the contract's 30 s (test configuration). */
  retryIntervalMs?: number;
  logger?: Logger;
  /** Called when Temporal answers again after it was found down: the deliveries recorded meanwhile wait for the sweep. */
  onRecovered?: () => void;
  /** Whether Temporal answers now: asked every second while it is down. */
  reachable?: () => Promise<boolean>;
}

/** How long a start may wait for Temporal before the delivery is left to the pending sweep. */
const START_DEADLINE_MS = 2_000;

/** Runs each delivery as a `deliverWebhook` workflow. */
export class TemporalDeliveryEngine implements DeliveryEngine {
  private readonly starts: WorkflowStarts;

  constructor(private readonly options: TemporalDeliveryEngineOptions) {
    this.starts = new WorkflowStarts((ref, meta) => this.startWorkflow(ref, meta), { logger: options.logger, onRecovered: options.onRecovered, probe: options.reachable });
  }

  /**
   * Queues the delivery's workflow start and answers at once: the row is committed, so the
   * caller (a publish, a test delivery, a resend) never waits for Temporal. A start that
   * fails leaves the row pending for the sweep.
   */
  async start(ref: DeliveryRef, meta: DeliveryMeta): Promise<{ workflowId: string }> {
    this.starts.enqueue(ref, meta);
    return { workflowId: workflowIdFor(ref, meta.series) };
  }

  /** Starts the workflow and waits for Temporal's answer (the pending sweep); throws when Temporal does not take it. */
  async startAwaited(ref: DeliveryRef, meta: DeliveryMeta): Promise<StartOutcome> {
    return this.starts.start(ref, meta);
  }

  /** Whether this process saw the workflow of this delivery's series exist (the sweep leaves those alone). */
  hasWorkflow(ref: DeliveryRef, series?: number): boolean {
    return this.starts.has(ref, series);
  }

  private async startWorkflow(ref: DeliveryRef, meta: DeliveryMeta): Promise<StartOutcome> {
    const workflowId = workflowIdFor(ref, meta.series);
    const deadline = Date.now() + START_DEADLINE_MS;
    try {
      await this.options.client.connection.withDeadline(deadline, () => this.options.client.workflow.start<typeof deliverWebhook>('deliverWebhook', {
        workflowId,
        taskQueue: this.options.taskQueue,
        args: this.options.retryIntervalMs === undefined || this.options.retryIntervalMs === RETRY_INTERVAL_MS ? [ref] : [ref, { sent: 0, retryIntervalMs: this.options.retryIntervalMs }],
        // A series of a delivery runs once: never beside a running one, never again after it closed.
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.FAIL,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        // The workflow's tasks share the queue fairly by endpoint, as its attempts do: one
        // endpoint's backlog of waiting deliveries does not queue another's first step.
        priority: { fairnessKey: ref.endpointId },
        memo: {
          organizationId: ref.organizationId,
          endpointId: ref.endpointId,
          eventId: ref.eventId,
          eventType: meta.eventType,
          targetHost: meta.targetHost,
          // A resend's series only: a first series' memo stays as it always was.
          ...(meta.series && meta.series > 1 && { series: meta.series }),
        },
        // The Temporal UI's summary line: what was sent where (the outcome is in the current details and DeliveryOutcome).
        staticSummary: `${meta.eventType} to ${meta.targetHost}${meta.series && meta.series > 1 ? `, series ${meta.series}` : ''}`,
        ...(this.options.searchAttributes && { typedSearchAttributes: searchAttributesFor(ref) }),
      }));
      return 'started';
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return 'existed';
      throw err;
    }
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

  /** Waits for the starts in flight; the client and its connection belong to the caller. */
  async close(): Promise<void> {
    await this.starts.close();
  }
}

function searchAttributesFor(ref: DeliveryRef): SearchAttributePair[] {
  return [
    { key: DELIVERY_SEARCH_ATTRIBUTES.organizationId, value: ref.organizationId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.endpointId, value: ref.endpointId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.eventId, value: ref.eventId },
    { key: DELIVERY_SEARCH_ATTRIBUTES.outcome, value: 'sending' },
    { key: DELIVERY_SEARCH_ATTRIBUTES.attempts, value: 0 },
  ];
}

/**
 * gRPC's reconnect backoff grows to two minutes while a server is down (1 s × 1.6 per
 * failure), so after an outage of half a minute starts failed with DEADLINE_EXCEEDED
 * ("waiting for metadata filters") for 14 s after the server was back. Capped at 1 s, the
 * channel tries again at least every second and starts resume within about a second.
 */
const RECONNECT_QUICKLY = { 'grpc.initial_reconnect_backoff_ms': 250, 'grpc.max_reconnect_backoff_ms': 1_000 };

/**
 * A client for the engine; the caller owns it and calls `close` at shutdown. The
 * connection is lazy: the API starts and serves while Temporal is unreachable (deliveries
 * wait as pending rows, which the sweep starts once it answers), and `reachable` says
 * whether it answers now, for /readyz and the metrics.
 */
export function createTemporalClient(options: TemporalConfig): { client: Client; reachable: () => Promise<boolean>; close: () => Promise<void> } {
  const connection = Connection.lazy({ ...temporalConnectionOptions(options), connectTimeout: 2_000, channelArgs: RECONNECT_QUICKLY });
  const client = new Client({ connection, namespace: options.namespace, interceptors: temporalClientInterceptors() });
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
