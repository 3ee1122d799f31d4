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

async function generate(): Promise<TestTls> {
  const x509 = await loadX509();
  const crypto = webcrypto;
  x509.cryptoProvider.set(crypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
  // Back-dated a day so clock skew between processes never makes it "not yet valid".
  const notBefore = new Date(Date.now() - DAY_MS);
  const notAfter = new Date(Date.now() + 30 * DAY_MS);

  const caKeys = (await crypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=Webhook Test CA',
    keys: caKeys,
    notBefore,
    notAfter,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });

  const serverKeys = (await crypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const server = await x509.X509CertificateGenerator.create({
    subject: 'CN=localhost',
    issuer: ca.subject,
    publicKey: serverKeys.publicKey,
    signingKey: caKeys.privateKey,
    notBefore,
    notAfter,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: 'dns', value: 'localhost' },
        { type: 'ip', value: '127.0.0.1' },
        { type: 'ip', value: '::1' },
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });

  const pkcs8 = await crypto.subtle.exportKey('pkcs8', serverKeys.privateKey);
  return {
    caPem: ca.toString('pem'),
    certPem: server.toString('pem'),
    keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY'),
  };
}
