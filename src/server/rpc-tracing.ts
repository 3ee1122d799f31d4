import type { Interceptor } from '@connectrpc/connect';
import { principalKey } from '../auth';
import { rpcTracingInterceptors } from '../tracing';
import { httpRuleOf } from './rest';

/**
 * The span of every call (src/tracing/rpc.ts), told who called and, for the REST gateway,
 * the route it served. A customer's call is traced under its organization and starts a trace
 * of its own; an internal service's or the operator's continues the caller's `traceparent`.
 */
export function rpcTracing(): Interceptor[] {
  return rpcTracingInterceptors({
    callerOf(values) {
      const principal = values.get(principalKey);
      if (!principal) return { trusted: false };
      if (principal.kind === 'customer') return { organizationId: principal.organizationId, trusted: false };
      return { caller: principal.kind === 'internal' ? principal.name : 'operator', trusted: true };
    },
    restRouteOf(method) {
      const rule = httpRuleOf(method);
      return rule && `${rule.verb} ${rule.template}`;
    },
  });
}
