export { startTracing, tracingOn, SAMPLERS, type SamplerName, type Tracing, type TracingConfig } from './setup';
export { inSpan, inDeliverySpan, noteInSpan, traceFields, deliveryAttributes, type DeliveryIds, type SpanNotes } from './spans';
export { rpcTracingInterceptors, type RpcTracingOptions, type TracedCaller } from './rpc';
export { tracedOutbound } from './outbound';
export { ClaimTraces, expectDeliveries } from './claims';
export { temporalClientInterceptors, workerTracing, WORKFLOW_TRACING_MODULES } from './temporal';
