export { createRpcHandler } from './rpc-handler';
export {
  afterRefusalRecords,
  clientGoneKey,
  pendingRefusalKey,
  createRequestContextInterceptor,
  createRequestGate,
  createStorableTextInterceptor,
  UNAVAILABLE_RETRY_AFTER_SECONDS,
  type CallObserver,
} from './request-context';
export { createRefusalAudit } from './refusal-audit';
export { createReflectionServices, REFLECTION_SERVICES } from './reflection';
export { isInvalidUtf8Decoding, strictUtf8 } from './utf8';
