/**
 * The reference for the gRPC figure: a bare connect-node server (h2c, connectNodeAdapter)
 * with one handler for ConnectionService/ListConnections that returns a constant response
 * (the real service's answer, captured once by the parent), no interceptors, no database.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { fromJson, type JsonValue } from '@bufbuild/protobuf';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { ConnectionService, ListConnectionsResponseSchema } from '../src/gen/publishing/v1/connection_service_pb';
import { emit, input, onStop, runMain } from './child';

interface Input {
  responseJson: JsonValue;
}

runMain(async () => {
  const { responseJson } = input<Input>();
  const response = fromJson(ListConnectionsResponseSchema, responseJson);
  const handler = connectNodeAdapter({
    routes: (router) => router.rpc(ConnectionService.method.listConnections, () => response),
  });
  const server = http2.createServer({}, handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.once('close', () => sessions.delete(session));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  onStop(async () => {
    for (const session of sessions) session.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  emit({ type: 'ready', url: `http://127.0.0.1:${port}`, pid: process.pid });
});
