import type { TLSConfig } from '@temporalio/client';
import type { TemporalConfig } from '../config';

/** What both the client's `Connection` and the worker's `NativeConnection` take to reach the server. */
export interface TemporalConnectionOptions {
  address: string;
  tls?: TLSConfig;
  apiKey?: string;
}

/**
 * The one place that turns the TEMPORAL_* settings into connection options, so the API, the
 * worker and every tool that talks to the configured server connect the same way: server CA,
 * client certificate (mTLS), server name and API key.
 */
export function temporalConnectionOptions(config: Pick<TemporalConfig, 'address' | 'tls' | 'apiKey'>): TemporalConnectionOptions {
  const { tls } = config;
  return {
    address: config.address,
    ...(tls && {
      tls: {
        ...(tls.serverCa && { serverRootCACertificate: tls.serverCa }),
        ...(tls.clientCert && { clientCertPair: { crt: tls.clientCert.cert, key: tls.clientCert.key } }),
        ...(tls.serverName && { serverNameOverride: tls.serverName }),
      },
    }),
    ...(config.apiKey && { apiKey: config.apiKey }),
  };
}
