import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { ConfigError, createLogger, loadConfig } from '../../src/config';
import { temporalConnectionOptions } from '../../src/delivery';
import { startTestApp } from '../support/app';
import { makeTestTls } from '../support/tls';

/**
 * TEMPORAL_TLS_* and TEMPORAL_API_KEY: how the API, the worker and the tools reach a Temporal
 * server that asks for TLS, a client certificate or an API key. A half-made setting stops the
 * process at start with the variable's name; neither a key file's content nor the API key is
 * ever part of a message or a log line.
 */
const API_KEY = 'temporal-cloud-api-key-that-must-never-be-logged-0123456789';
let dir: string;
let files: { ca: string; cert: string; key: string; missing: string; unreadable: string; notPem: string };
let keyPem: string;

beforeAll(async () => {
  const tls = await makeTestTls();
  keyPem = tls.keyPem;
  dir = mkdtempSync(path.join(os.tmpdir(), 'temporal-tls-config-'));
  files = {
    ca: path.join(dir, 'ca.pem'),
    cert: path.join(dir, 'client.pem'),
    key: path.join(dir, 'client.key'),
    missing: path.join(dir, 'nothing-here.pem'),
    unreadable: path.join(dir, 'unreadable.key'),
    notPem: path.join(dir, 'not-pem.key'),
  };
  writeFileSync(files.ca, tls.caPem);
  writeFileSync(files.cert, tls.certPem);
  writeFileSync(files.key, tls.keyPem);
  writeFileSync(files.notPem, 'just some bytes, no PEM here');
  // A directory cannot be read as a file whoever runs the test (root reads a file whatever its mode).
  mkdirSync(files.unreadable);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const base = { NODE_ENV: 'test', TEMPORAL_ADDRESS: 'temporal.internal:7233' };

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

it('connects in plaintext when no TLS setting is given (a development server on loopback)', () => {
  const temporal = loadConfig(base).temporal!;
  expect({ tls: temporal.tls, apiKey: temporal.apiKey }).toEqual({ tls: null, apiKey: null });
  expect(temporalConnectionOptions(temporal)).toEqual({ address: 'temporal.internal:7233' });
});

it('reads the server CA, the client certificate and key and the server name into one set of connection options (mTLS)', async () => {
  const tls = await makeTestTls();
  const temporal = loadConfig({
    ...base,
    TEMPORAL_TLS_CA_FILE: files.ca,
    TEMPORAL_TLS_CERT_FILE: files.cert,
    TEMPORAL_TLS_KEY_FILE: files.key,
    TEMPORAL_TLS_SERVER_NAME: 'frontend.temporal.internal',
  }).temporal!;
  const options = temporalConnectionOptions(temporal);
  expect(options.address).toBe('temporal.internal:7233');
  expect(options.apiKey).toBeUndefined();
  expect(options.tls?.serverNameOverride).toBe('frontend.temporal.internal');
  expect(options.tls?.serverRootCACertificate?.toString()).toBe(tls.caPem);
  expect(options.tls?.clientCertPair?.crt.toString()).toBe(tls.certPem);
  expect(options.tls?.clientCertPair?.key.toString()).toBe(tls.keyPem);
});

it('sends an API key over TLS with the system roots (Temporal Cloud)', () => {
  const options = temporalConnectionOptions(loadConfig({ ...base, TEMPORAL_API_KEY: API_KEY }).temporal!);
  expect(options).toEqual({ address: 'temporal.internal:7233', tls: {}, apiKey: API_KEY });
  expect(temporalConnectionOptions(loadConfig({ ...base, TEMPORAL_TLS: 'true' }).temporal!)).toEqual({ address: 'temporal.internal:7233', tls: {} });
});

it('refuses a client key without its certificate, and a certificate without its key', () => {
  expect(problemsOf({ ...base, TEMPORAL_TLS_KEY_FILE: files.key })).toEqual([
    'TEMPORAL_TLS_KEY_FILE is set without TEMPORAL_TLS_CERT_FILE: mTLS needs the client certificate and its key',
  ]);
  expect(problemsOf({ ...base, TEMPORAL_TLS_CERT_FILE: files.cert })).toEqual([
    'TEMPORAL_TLS_CERT_FILE is set without TEMPORAL_TLS_KEY_FILE: mTLS needs the client certificate and its key',
  ]);
});

it('refuses a file it cannot read, or one that is not PEM, naming the variable and the path but never the content', () => {
  expect(problemsOf({ ...base, TEMPORAL_TLS_CA_FILE: files.missing })).toEqual([`TEMPORAL_TLS_CA_FILE: cannot read ${files.missing} (ENOENT)`]);
  expect(problemsOf({ ...base, TEMPORAL_TLS_CERT_FILE: files.cert, TEMPORAL_TLS_KEY_FILE: files.unreadable })).toEqual([
    `TEMPORAL_TLS_KEY_FILE: cannot read ${files.unreadable} (EISDIR)`,
  ]);
  // A certificate given where the key belongs: its text must not leak into the message.
  const swapped = problemsOf({ ...base, TEMPORAL_TLS_CERT_FILE: files.cert, TEMPORAL_TLS_KEY_FILE: files.cert });
  expect(swapped).toEqual([`TEMPORAL_TLS_KEY_FILE: ${files.cert} is not a PEM file of the expected kind`]);
  expect(problemsOf({ ...base, TEMPORAL_TLS_CA_FILE: files.notPem })).toEqual([`TEMPORAL_TLS_CA_FILE: ${files.notPem} is not a PEM file of the expected kind`]);
  expect(problemsOf({ ...base, TEMPORAL_TLS_CA_FILE: files.key }).join('\n')).not.toContain(keyPem.split('\n')[1]);
});

it('refuses TLS settings or an API key without TEMPORAL_ADDRESS, and an API key with TLS turned off', () => {
  const withoutAddress = problemsOf({ NODE_ENV: 'test', TEMPORAL_API_KEY: API_KEY, TEMPORAL_TLS_CA_FILE: files.ca });
  expect(withoutAddress).toEqual(['TEMPORAL_TLS_CA_FILE, TEMPORAL_API_KEY set without TEMPORAL_ADDRESS: the embedded engine never connects to Temporal']);
  const inClear = problemsOf({ ...base, TEMPORAL_TLS: 'false', TEMPORAL_API_KEY: API_KEY });
  expect(inClear).toEqual(['TEMPORAL_TLS=false contradicts TEMPORAL_API_KEY: an API key or a certificate is never sent in clear']);
  expect(problemsOf({ ...base, TEMPORAL_TLS: 'yes' })).toEqual(['TEMPORAL_TLS must be true or false (got "yes")']);
  expect([...withoutAddress, ...inClear].join('\n')).not.toContain(API_KEY);
});

it('never writes the API key to its log while Temporal cannot be reached', async () => {
  const lines: string[] = [];
  const logger = createLogger(
    'debug',
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );
  const closed = net.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', () => resolve()));
  const { port } = closed.address() as net.AddressInfo;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const t = await startTestApp({ TEMPORAL_ADDRESS: `127.0.0.1:${port}`, TEMPORAL_API_KEY: API_KEY, TEMPORAL_TLS_CA_FILE: files.ca }, { logger });
  try {
    const ready = await fetch(`${t.url}/readyz`);
    expect(await ready.json()).toEqual({ status: 'degraded', down: ['temporal'] });
    const tenant = await t.tenant();
    const created = await t.rest('POST', '/api/v1/webhooks', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/in' } });
    const sent = await t.rest('POST', `/api/v1/webhooks/${created.body.endpoint.id}/test`, { apiKey: tenant.apiKey });
    expect(sent.body.delivery).toMatchObject({ status: 'pending' });
  } finally {
    await t.close();
  }
  expect(lines.some((line) => line.includes('deliveries run on Temporal'))).toBe(true);
  expect(lines.join('')).not.toContain(API_KEY);
});
