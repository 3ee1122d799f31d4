import { readFileSync } from 'node:fs';

export interface TemporalConfig {
  address: string;
  namespace: string;
  taskQueue: string;
  searchAttributes: boolean;
  /** Null: a plaintext connection (a development server on loopback). */
  tls: TemporalTlsConfig | null;
  /** Temporal Cloud's API key, sent as `Authorization: Bearer`; only over TLS. */
  apiKey: string | null;
}

/** Read from the files at start, so an unreadable file stops the process before it serves. */
export interface TemporalTlsConfig {
  /** The CA that signed the server's certificate; null trusts the system's roots (Temporal Cloud). */
  serverCa: Buffer | null;
  /** mTLS: the client certificate (chain) and its private key, always both. */
  clientCert: { cert: Buffer; key: Buffer } | null;
  /** The name the server's certificate must carry when it is not the address's host. */
  serverName: string | null;
}

type Env = Record<string, string | undefined>;

const TLS_FILES = ['TEMPORAL_TLS_CA_FILE', 'TEMPORAL_TLS_CERT_FILE', 'TEMPORAL_TLS_KEY_FILE'] as const;

/**
 * TEMPORAL_* settings. TLS is on when any TEMPORAL_TLS_* setting or an API key is given (or
 * TEMPORAL_TLS=true, for a server whose certificate the system's roots trust). A half-made
 * setting is refused with the variable's name, never with a file's content or the key.
 */
export function loadTemporalConfig(env: Env, problems: string[]): TemporalConfig | null {
  const set = (name: string) => Boolean(env[name]);
  const temporalSettings = [...TLS_FILES, 'TEMPORAL_TLS_SERVER_NAME', 'TEMPORAL_API_KEY', 'TEMPORAL_TLS'].filter(set);
  if (!env.TEMPORAL_ADDRESS) {
    if (temporalSettings.length > 0) problems.push(`${temporalSettings.join(', ')} set without TEMPORAL_ADDRESS: the embedded engine never connects to Temporal`);
    return null;
  }
  const tlsFlag = env.TEMPORAL_TLS;
  if (tlsFlag && tlsFlag !== 'true' && tlsFlag !== 'false') problems.push(`TEMPORAL_TLS must be true or false (got "${tlsFlag}")`);
  const apiKey = env.TEMPORAL_API_KEY || null;
  const wantsTls = [...TLS_FILES, 'TEMPORAL_TLS_SERVER_NAME'].some(set) || apiKey !== null;
  if (tlsFlag === 'false' && wantsTls) {
    problems.push(`TEMPORAL_TLS=false contradicts ${temporalSettings.filter((n) => n !== 'TEMPORAL_TLS').join(', ')}: an API key or a certificate is never sent in clear`);
  }
  if (set('TEMPORAL_TLS_CERT_FILE') !== set('TEMPORAL_TLS_KEY_FILE')) {
    problems.push(
      set('TEMPORAL_TLS_KEY_FILE')
        ? 'TEMPORAL_TLS_KEY_FILE is set without TEMPORAL_TLS_CERT_FILE: mTLS needs the client certificate and its key'
        : 'TEMPORAL_TLS_CERT_FILE is set without TEMPORAL_TLS_KEY_FILE: mTLS needs the client certificate and its key',
    );
  }
  const pem = (name: (typeof TLS_FILES)[number], label: RegExp): Buffer | null => {
    const file = env[name];
    if (!file) return null;
    let content: Buffer;
    try {
      content = readFileSync(file);
    } catch (error) {
      problems.push(`${name}: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
      return null;
    }
    if (!label.test(content.toString('latin1'))) problems.push(`${name}: ${file} is not a PEM file of the expected kind`);
    return content;
  };
  const serverCa = pem('TEMPORAL_TLS_CA_FILE', /-----BEGIN CERTIFICATE-----/);
  const cert = pem('TEMPORAL_TLS_CERT_FILE', /-----BEGIN CERTIFICATE-----/);
  const key = pem('TEMPORAL_TLS_KEY_FILE', /-----BEGIN [A-Z ]*PRIVATE KEY-----/);
  return {
    address: env.TEMPORAL_ADDRESS,
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    taskQueue: env.TEMPORAL_TASK_QUEUE || 'webhook-deliveries',
    searchAttributes: env.TEMPORAL_SEARCH_ATTRIBUTES === 'true',
    tls:
      wantsTls || tlsFlag === 'true'
        ? { serverCa, clientCert: cert && key ? { cert, key } : null, serverName: env.TEMPORAL_TLS_SERVER_NAME || null }
        : null,
    apiKey,
  };
}
