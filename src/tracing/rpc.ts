import { ConnectError, type ContextValues, type Interceptor } from '@connectrpc/connect';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import type { DescMethod } from '@bufbuild/protobuf';
import { requestIdKey, transportKey } from '../context';
import { errorInfoOf } from '../errors';
import { activeTracing } from './state';

/** Who called, as the request gate established it. */
export interface TracedCaller {
  organizationId?: string;
  /** The internal service or operator that called. */
  caller?: string;
  /**
   * Whether the caller's `traceparent` is followed. A customer's is not: a sampled flag from
   * outside would decide what this service records and exports.
   */
  trusted: boolean;
}

export interface RpcTracingOptions {
  callerOf(values: ContextValues): TracedCaller;
  /** `POST /api/v1/webhooks/{id}/test` for a method the REST gateway serves. */
  restRouteOf(method: DescMethod): string | null;
}

/** The stable codes that are the service's failure, not the caller's: their spans are marked failed. */
const SERVER_FAULTS = new Set(['INTERNAL', 'UNAVAILABLE']);

/**
 * A server span per call, on every protocol (gRPC, gRPC-web, Connect and REST), placed
 * outermost so that everything the call does, its log lines included, is inside it. Named
 * `<service>/<method>`, or the REST route for a call through the gateway; it carries the
 * protocol, the organization (or the internal caller), the request id and, for a refusal,
 * its stable code. Empty with tracing off: nothing is added to a call.
 */
export function rpcTracingInterceptors(options: RpcTracingOptions): Interceptor[] {
  const tracing = activeTracing();
  if (!tracing) return [];
  return [
    (next) => async (req) => {
      const transport = req.contextValues.get(transportKey);
      const route = transport === 'rest' ? options.restRouteOf(req.method) : null;
      const caller = options.callerOf(req.contextValues);
      const parent = caller.trusted ? propagation.extract(ROOT_CONTEXT, req.header, headerGetter) : ROOT_CONTEXT;
      const attributes: Attributes = {
        'rpc.system': transport === 'grpc' || transport === 'grpc-web' ? 'grpc' : 'connect_rpc',
        'rpc.service': req.service.typeName,
        'rpc.method': req.method.name,
        'publishing.transport': transport ?? 'connect',
        'publishing.request_id': req.contextValues.get(requestIdKey),
        ...(route && { 'http.route': route.slice(route.indexOf(' ') + 1), 'http.request.method': route.slice(0, route.indexOf(' ')) }),
        ...(caller.organizationId && { 'publishing.organization_id': caller.organizationId }),
        ...(caller.caller && { 'publishing.caller': caller.caller }),
      };
      const span = tracing.tracer.startSpan(route ?? `${req.service.typeName}/${req.method.name}`, { kind: SpanKind.SERVER, attributes }, parent);
      return context.with(trace.setSpan(parent, span), async () => {
        try {
          return await next(req);
        } catch (error) {
          const code = error instanceof ConnectError ? errorInfoOf(error)?.code : undefined;
          span.setAttribute('publishing.code', code ?? 'INTERNAL');
          if (!code || SERVER_FAULTS.has(code)) span.setStatus({ code: SpanStatusCode.ERROR });
          throw error;
        } finally {
          span.end();
        }
      });
    },
  ];
}

const headerGetter = {
  keys: (carrier: Headers) => [...carrier.keys()],
  get: (carrier: Headers, key: string) => carrier.get(key) ?? undefined,
};
