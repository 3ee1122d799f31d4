export { startTracing, type Tracing } from './setup';
export { tracingOn, SAMPLERS, type SamplerName, type TracingConfig } from './state';
export { inSpan, inDeliverySpan, noteInSpan, traceFields, deliveryAttributes, type DeliveryIds, type SpanNotes } from './spans';
export { rpcTracingInterceptors, type RpcTracingOptions, type TracedCaller } from './rpc';
export { tracedOutbound } from './outbound';
export { ClaimTraces, expectDeliveries } from './claims';
export { temporalClientInterceptors, workerTracing, WORKFLOW_TRACING_MODULES } from './temporal';
