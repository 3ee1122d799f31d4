/**
 * Test TLS material: a throwaway CA and a server certificate it signed, valid for
 * `localhost`, `127.0.0.1` and `::1`. Generated in-process (no openssl binary, no
 * files); the first call takes a few milliseconds and later calls reuse the result.
 *
 *   const { caPem, keyPem, certPem } = await makeTestTls();
 *   https.createServer({ key: keyPem, cert: certPem });   // server side
 *   createOutboundClient({ extraCa: caPem, ... });         // client side trusts the CA
 *
 * A client that is not given `caPem` must reject the server: that is how tests
 * exercise the "untrusted certificate" path.
 */
import { webcrypto } from 'node:crypto';
import type * as X509Module from '@peculiar/x509';

type X509 = typeof X509Module;

export interface TestTls {
  /** PEM of the CA certificate; give it to clients as an extra trusted root. */
  caPem: string;
  /** PEM (PKCS#8) private key of the server certificate. */
  keyPem: string;
  /** PEM of the server certificate (leaf only; the CA is not in the chain). */
  certPem: string;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 60 * 60 * 1000;

let cached: Promise<TestTls> | undefined;

export function makeTestTls(): Promise<TestTls> {
  cached ??= generate();
  return cached;
}

/** @peculiar/x509 resolves its services through tsyringe, which needs the Reflect metadata API. */
async function loadX509(): Promise<X509> {
  await import('reflect-metadata');
  return import('@peculiar/x509');
}

/** A CA whose certificates each call issues; the same CA signs a server's and its clients' certificates. */
interface Authority {
  x509: X509;
  keys: webcrypto.CryptoKeyPair;
  cert: X509Module.X509Certificate;
  notBefore: Date;
  notAfter: Date;
}

async function newAuthority(name: string): Promise<Authority> {
  const x509 = await loadX509();
  x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
  // Back-dated a day so clock skew between processes never makes it "not yet valid".
  const notBefore = new Date(Date.now() - DAY_MS);
  const notAfter = new Date(Date.now() + 30 * DAY_MS);
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: `CN=${name}`,
    keys,
    notBefore,
    notAfter,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { x509, keys, cert, notBefore, notAfter };
}

/** A leaf certificate: for a server (valid for loopback's names) or for a client (mTLS). */
async function issue(ca: Authority, subject: string, use: 'server' | 'client'): Promise<{ certPem: string; keyPem: string }> {
  const { x509 } = ca;
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create({
    subject: `CN=${subject}`,
    issuer: ca.cert.subject,
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    notBefore: ca.notBefore,
    notAfter: ca.notAfter,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([use === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
      ...(use === 'server'
        ? [
            new x509.SubjectAlternativeNameExtension([
              { type: 'dns', value: 'localhost' },
              { type: 'ip', value: '127.0.0.1' },
              { type: 'ip', value: '::1' },
            ]),
          ]
        : []),
      await x509.AuthorityKeyIdentifierExtension.create(ca.keys.publicKey),
    ],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { certPem: cert.toString('pem'), keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}

async function generate(): Promise<TestTls> {
  const ca = await newAuthority('Webhook Test CA');
  const server = await issue(ca, 'localhost', 'server');
  return { caPem: ca.cert.toString('pem'), ...server };
}

/** Mutual TLS: a CA of its own, a server certificate for loopback and client certificates it signed. */
export interface MutualTls {
  caPem: string;
  server: { certPem: string; keyPem: string };
  /** Certificates for clients, by name (the certificate's common name). */
  clients: Record<string, { certPem: string; keyPem: string }>;
}

/** Fresh at every call: a server that asks for client certificates trusts only this CA. */
export async function makeMutualTls(name: string, clientNames: string[]): Promise<MutualTls> {
  const ca = await newAuthority(`${name} CA`);
  const clients: MutualTls['clients'] = {};
  for (const client of clientNames) clients[client] = await issue(ca, client, 'client');
  return { caPem: ca.cert.toString('pem'), server: await issue(ca, 'localhost', 'server'), clients };
}
