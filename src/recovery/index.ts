export {
  DeliveryRecovery,
  MAX_RECOVERY_WINDOW_MS,
  RECOVERY_BATCH_SIZE,
  RECOVERY_BATCH_INTERVAL_MS,
  RECOVERY_FINISHED_EVENT,
  deliveryNotFound,
  deleteFinishedJobs,
  payloadGone,
  type AuditedChange,
  type DeliveryRecoveryDeps,
  type RecoveryAnswer,
  type RecoveryView,
} from './recovery';
export { DeliveryLogServiceImpl, attemptMessage, recoveryMessage, recoverAnswerMessage, windowInstant, type DeliveryLogMethods } from './service';
