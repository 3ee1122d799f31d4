import { createContextKey } from '@connectrpc/connect';

/** Per-request values shared by interceptors, services and logs. */
export const requestIdKey = createContextKey<string>('', { description: 'request id' });

export type Transport = 'grpc' | 'grpc-web' | 'connect' | 'rest';
export const transportKey = createContextKey<Transport | null>(null, { description: 'transport' });
