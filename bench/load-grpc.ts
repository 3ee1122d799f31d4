/**
 * gRPC unary load as a segment server (see child.ts): one createGrpcTransport (one
 * HTTP/2 session), K concurrent loops calling ConnectionService/ListConnections. The same
 * code measures the real service and the bare connect-node server.
 */
import { createClient } from '@connectrpc/connect';
import { benchGrpcTransport } from './grpc-transport';
import { ConnectionService } from '../src/gen/publishing/v1/connection_service_pb';
import { closedLoop, input, runMain, serveSegments } from './child';

interface Input {
  baseUrl: string;
  apiKey: string;
  loops: number;
  warmupSeconds: number;
}

runMain(async () => {
  const spec = input<Input>();
  const client = createClient(ConnectionService, benchGrpcTransport(spec.baseUrl));
  const headers = { authorization: `Bearer ${spec.apiKey}` };
  const once = async () => {
    await client.listConnections({}, { headers });
  };
  await serveSegments({
    warmup: () => closedLoop(spec.loops, spec.warmupSeconds, once),
    segment: (command) => closedLoop(spec.loops, command.seconds ?? 1, once, command.recordLatencies),
    cleanup: async () => undefined,
  });
});
