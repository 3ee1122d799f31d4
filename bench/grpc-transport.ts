/**
 * The gRPC transport the bench's callers use, configured as an internal service on the
 * same network would configure its client. One HTTP/2 session; its connection-level
 * receive window raised from HTTP/2's 64 KiB (which Node's client keeps unless told
 * otherwise) to 8 MiB, as gRPC's own clients do (grpc-java opens with 1 MiB, grpc-go grows
 * its window with the measured bandwidth-delay product): with 16 calls in flight and
 * answers of ~30 KB, a 64 KiB window has the server wait for the client's window updates
 * several times per round of answers.
 *
 * It offers gzip for answers, connect-node's default; the service answers uncompressed.
 */
import type http2 from 'node:http2';
import { createGrpcTransport, Http2SessionManager } from '@connectrpc/connect-node';
import type { Transport } from '@connectrpc/connect';

const CONNECTION_WINDOW_BYTES = 8 * 1024 * 1024;

/** Raises each new session's connection window when its first stream opens. */
class WideWindowSessionManager extends Http2SessionManager {
  private readonly widened = new WeakSet<http2.Http2Session>();

  override async request(...args: Parameters<Http2SessionManager['request']>): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(...args);
    const session = stream.session;
    if (session && !this.widened.has(session)) {
      this.widened.add(session);
      session.setLocalWindowSize(CONNECTION_WINDOW_BYTES);
    }
    return stream;
  }
}

export function benchGrpcTransport(baseUrl: string): Transport {
  return createGrpcTransport({ baseUrl, sessionManager: new WideWindowSessionManager(baseUrl) });
}
