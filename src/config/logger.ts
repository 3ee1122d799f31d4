import pino, { type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs. Header values that carry credentials are never written. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'publishing-connections' },
    redact: {
      paths: ['authorization', '*.authorization', 'headers.authorization', 'secret', '*.secret', 'signingSecret'],
      censor: '[redacted]',
    },
  });
}
