import pino, { type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs (to stdout unless told otherwise). Header values that carry credentials are never written. */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { service: 'publishing-connections' },
    redact: {
      paths: ['authorization', '*.authorization', 'headers.authorization', 'secret', '*.secret', 'signingSecret'],
      censor: '[redacted]',
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
