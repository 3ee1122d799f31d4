import pino, { type DestinationStream, type Logger } from 'pino';
import { traceFields } from '../tracing';

export type { Logger };

/**
 * Structured JSON logs (to stdout unless told otherwise). Header values that carry credentials
 * are never written. A line written inside a span carries its trace_id and span_id.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'publishing-connections' },
    mixin: traceFields,
    redact: {
      paths: ['authorization', '*.authorization', 'headers.authorization', 'secret', '*.secret', 'signingSecret'],
      censor: '[redacted]',
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
