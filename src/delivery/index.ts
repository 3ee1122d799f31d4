export type { DeliveryEngine, DeliveryRef, DeliveryMeta, DeliveryActivities, AttemptOutcome } from './contract';
export { FAILURE_TYPES } from './contract';
export {
  createActivities,
  activityDepsFromConfig,
  DeliveryAttempts,
  type ActivityDeps,
  type AttemptLiveness,
  type AttemptResult,
  type DeliveryEvent,
} from './activities';
export {
  DeliveryRecords,
  GLOBAL_SCOPE,
  RECENT_DELIVERIES,
  OPEN_STATUSES,
  FINAL_STATUSES,
  RECOVERABLE_STATUSES,
  INTERRUPTED_ATTEMPT,
  payloadStateOf,
  FAILING_PAUSE,
  type FailingEndpoint,
  type FailingThreshold,
  type ListedDelivery,
  type NewDelivery,
  type EventDelivery,
  type KillSwitchState,
  type DeliveryView,
  type AttemptView,
  type DeadLetterView,
  type AttemptStart,
  type ClaimOptions,
  type ClaimedDelivery,
  type DeliveryLogFilter,
  type DeliveryWindow,
  type ErasureCounts,
  type ErasureCursor,
  type ErasureScope,
} from './records';
export { fanOutInsert, deliveredJson, deliveredOf, DELIVERY_EVENT_UNIQUE, type FanOutRow, type DeliveredRow, type DeliveredJson } from './fan-out';
export { EmbeddedDeliveryEngine } from './embedded-engine';
export { TemporalDeliveryEngine, createTemporalClient, DELIVERY_SEARCH_ATTRIBUTES } from './temporal-engine';
export { temporalConnectionOptions, type TemporalConnectionOptions } from './temporal-connection';
export { workflowIdFor, workflowIdParts, workflowUiLink, MAX_DELIVERY_WORKFLOW_ID_LENGTH, DELIVERY_WORKFLOW_ID_PREFIX } from './workflow-id';
export { PendingDeliverySweeper } from './pending-sweeper';
export { DeliveryMetrics } from './metrics';
export { endpointStatistics, rollUpStatistics, StatisticsRollup, type EndpointStatistics } from './statistics';
