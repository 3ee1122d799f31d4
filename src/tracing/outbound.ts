import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { OutboundClient } from '../outbound';
import { activeTracing } from './state';
import { failWith } from './spans';

/**
 * The outbound client with a client span per request (`POST`): the receiver's host and port,
 * the status it answered, or the error's type; never the URL's path or query, a header, the
 * body or a signature, which may carry the customer's secrets. The request carries the span's
 * `traceparent` (W3C Trace Context) so a receiver can join its own trace to ours; the header
 * is not covered by the signature. With tracing off, the client is returned as it is.
 */
export function tracedOutbound(client: OutboundClient): OutboundClient {
  const tracing = activeTracing();
  if (!tracing) return client;
  return {
    post(url, headers, body, options) {
      const target = URL.canParse(url) ? new URL(url) : null;
      const attributes = {
        'http.request.method': 'POST',
        ...(target && { 'server.address': target.hostname, 'server.port': Number(target.port || 443) }),
      };
      const span = tracing.tracer.startSpan('POST', { kind: SpanKind.CLIENT, attributes });
      const inSpan = trace.setSpan(context.active(), span);
      const sent = { ...headers };
      propagation.inject(inSpan, sent);
      return context.with(inSpan, async () => {
        try {
          const response = await client.post(url, sent, body, options);
          span.setAttribute('http.response.status_code', response.status);
          if (response.status >= 400) span.setStatus({ code: SpanStatusCode.ERROR });
          return response;
        } catch (error) {
          failWith(span, error);
          throw error;
        } finally {
          span.end();
        }
      });
    },
  };
}
