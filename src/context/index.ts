import { randomUUID } from 'node:crypto';
import { createContextKey } from '@connectrpc/connect';

/** Per-request values shared by interceptors, services and logs. */
export const requestIdKey = createContextKey<string>('', { description: 'request id' });

export type Transport = 'grpc' | 'grpc-web' | 'connect' | 'rest';
export const transportKey = createContextKey<Transport | null>(null, { description: 'transport' });

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** The caller's x-request-id when it is a sane token, else a new one: the same rule on every transport. */
export function requestIdFrom(incoming: string | null | undefined): string {
  return incoming && REQUEST_ID.test(incoming) ? incoming : randomUUID();
}
