import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, type FileDescriptorProto } from '@bufbuild/protobuf/wkt';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import * as v1 from '../../src/gen/grpc/reflection/v1/reflection_pb';
import * as v1alpha from '../../src/gen/grpc/reflection/v1alpha/reflection_pb';
import { startTestApp, type TestApp } from '../support/app';

const run = promisify(execFile);
const BUF = join(__dirname, '../../node_modules/.bin/buf');
/**
 * grpcurl, where it was built (README, "Server reflection"): not a dependency of the suite,
 * whose reflection is checked above with buf curl and the protocol itself.
 */
const GRPCURL = join(__dirname, '../../.tools/bin/grpcurl');

const EXPECTED_SERVICES = [
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
  'publishing.v1.ConnectionService',
  'publishing.v1.PostService',
  'publishing.v1.WebhookService',
];

/** A request's message_request, in the shape v1 and v1alpha share. */
type Request =
  | { case: 'listServices'; value: string }
  | { case: 'fileByFilename'; value: string }
  | { case: 'fileContainingSymbol'; value: string }
  | { case: 'allExtensionNumbersOfType'; value: string }
  | { case: 'fileContainingExtension'; value: { containingType: string; extensionNumber: number } };

/** One bidi stream over real gRPC (h2c): sends every request, collects every answer. */
type Reflect = (requests: Request[]) => Promise<v1.ServerReflectionResponse[] | v1alpha.ServerReflectionResponse[]>;

async function collect<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of stream) out.push(item);
  return out;
}

function reflectorFor(version: 'v1' | 'v1alpha', baseUrl: string): Reflect {
  const transport = createGrpcTransport({ baseUrl });
  const clientV1 = createClient(v1.ServerReflection, transport);
  const clientV1alpha = createClient(v1alpha.ServerReflection, transport);
  return (requests) => {
    async function* send() {
      for (const messageRequest of requests) yield { host: 'localhost', messageRequest };
    }
    return version === 'v1' ? collect(clientV1.serverReflectionInfo(send())) : collect(clientV1alpha.serverReflectionInfo(send()));
  };
}

function filesOf(res: v1.ServerReflectionResponse | v1alpha.ServerReflectionResponse): FileDescriptorProto[] {
  if (res.messageResponse.case !== 'fileDescriptorResponse') {
    throw new Error(`expected files, got ${res.messageResponse.case}: ${JSON.stringify(res.messageResponse.value)}`);
  }
  return res.messageResponse.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
}

describe('gRPC server reflection', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  describe.each(['v1', 'v1alpha'] as const)('grpc.reflection.%s over a gRPC bidi stream, without a key', (version) => {
    let reflect: Reflect;
    beforeAll(() => {
      reflect = reflectorFor(version, t.url);
    });

    it('lists the served services', async () => {
      const [res] = await reflect([{ case: 'listServices', value: '' }]);
      expect(res?.validHost).toBe('localhost');
      expect(res?.originalRequest?.messageRequest).toEqual({ case: 'listServices', value: '' });
      expect(res?.messageResponse.case).toBe('listServicesResponse');
      const names = res?.messageResponse.case === 'listServicesResponse' ? res.messageResponse.value.service.map((s) => s.name) : [];
      expect(names).toEqual(EXPECTED_SERVICES);
    });

    it('answers file_containing_symbol with the file and its transitive imports, each once', async () => {
      const [res] = await reflect([{ case: 'fileContainingSymbol', value: 'publishing.v1.WebhookService' }]);
      const files = filesOf(res as v1.ServerReflectionResponse);
      const names = files.map((f) => f.name);
      expect(names[0]).toBe('publishing/v1/webhook_service.proto');
      expect(names).toEqual(
        expect.arrayContaining([
          'google/api/annotations.proto',
          'google/api/http.proto',
          'google/protobuf/descriptor.proto',
          'google/protobuf/timestamp.proto',
          'publishing/v1/access.proto',
        ]),
      );
      expect(new Set(names).size).toBe(names.length);
      const own = files[0] as FileDescriptorProto;
      expect(own.package).toBe('publishing.v1');
      expect(own.service.map((s) => s.name)).toEqual(['WebhookService']);
      expect(own.dependency).toEqual(expect.arrayContaining(['publishing/v1/access.proto', 'google/api/annotations.proto']));
      // Every import of every file sent is itself in the answer.
      for (const file of files) for (const dependency of file.dependency) expect(names).toContain(dependency);
    });

    it('finds methods, nested types and extensions, and sends shared imports once per stream', async () => {
      const [method, message, ext, second, byName] = await reflect([
        { case: 'fileContainingSymbol', value: 'publishing.v1.ConnectionService.ListConnections' },
        { case: 'fileContainingSymbol', value: 'publishing.v1.ListConnectionsResponse' },
        { case: 'fileContainingExtension', value: { containingType: 'google.protobuf.MethodOptions', extensionNumber: 72295728 } },
        { case: 'fileContainingSymbol', value: 'publishing.v1.WebhookService' },
        { case: 'fileByFilename', value: 'google/protobuf/timestamp.proto' },
      ]);
      const first = filesOf(method as v1.ServerReflectionResponse).map((f) => f.name);
      expect(first[0]).toBe('publishing/v1/connection_service.proto');
      expect(first).toContain('google/protobuf/timestamp.proto');
      // Already sent on this stream: only the asked-for file comes again.
      expect(filesOf(message as v1.ServerReflectionResponse).map((f) => f.name)).toEqual(['publishing/v1/connection_service.proto']);
      expect(filesOf(ext as v1.ServerReflectionResponse).map((f) => f.name)).toEqual(['google/api/annotations.proto']);
      // The webhook service's own imports not yet sent on this stream come with it.
      expect(filesOf(second as v1.ServerReflectionResponse).map((f) => f.name)).toEqual(['publishing/v1/webhook_service.proto', 'google/protobuf/struct.proto']);
      expect(filesOf(byName as v1.ServerReflectionResponse).map((f) => f.name)).toEqual(['google/protobuf/timestamp.proto']);
    });

    it('describes google.rpc.ErrorInfo, which error details carry, without listing it as a service', async () => {
      const [answer] = await reflect([{ case: 'fileContainingSymbol', value: 'google.rpc.ErrorInfo' }]);
      const files = filesOf(answer!);
      expect(files[0]!.name).toBe('google/rpc/error_details.proto');
      expect(files[0]!.messageType.map((m) => m.name)).toContain('ErrorInfo');
    });

    it('does not describe the operator or the internal event service', async () => {
      const answers = await reflect([
        { case: 'fileContainingSymbol', value: 'publishing.operator.v1.OperatorService' },
        { case: 'fileContainingSymbol', value: 'publishing.internal.v1.EventService' },
      ]);
      expect(answers.map((a) => a.messageResponse.case)).toEqual(['errorResponse', 'errorResponse']);
    });

    it('lists extension numbers of a type', async () => {
      const [res] = await reflect([{ case: 'allExtensionNumbersOfType', value: 'google.protobuf.MethodOptions' }]);
      expect(res?.messageResponse.case).toBe('allExtensionNumbersResponse');
      const value = res?.messageResponse.value as { baseTypeName: string; extensionNumber: number[] };
      expect(value.baseTypeName).toBe('google.protobuf.MethodOptions');
      expect(value.extensionNumber).toContain(72295728);
    });

    it('answers unknown symbols, files and extensions with NOT_FOUND and keeps the stream open', async () => {
      const answers = await reflect([
        { case: 'fileContainingSymbol', value: 'publishing.v1.NoSuchService' },
        { case: 'fileByFilename', value: 'no/such.proto' },
        { case: 'fileContainingExtension', value: { containingType: 'google.protobuf.MethodOptions', extensionNumber: 1 } },
        { case: 'allExtensionNumbersOfType', value: 'no.such.Type' },
        { case: 'listServices', value: '' },
      ]);
      expect(answers).toHaveLength(5);
      for (const res of answers.slice(0, 4)) {
        expect(res.messageResponse.case).toBe('errorResponse');
        expect(res.messageResponse.value).toMatchObject({ errorCode: 5 });
      }
      expect(answers[0]?.messageResponse.value).toMatchObject({ errorMessage: expect.stringContaining('publishing.v1.NoSuchService') });
      expect(answers[4]?.messageResponse.case).toBe('listServicesResponse');
    });
  });

  describe('with the buf curl CLI (no schema files: reflection only)', () => {
    const base = () => `http://127.0.0.1:${t.app.port}`;
    const curl = (...args: string[]) =>
      run(BUF, ['curl', '--protocol', 'grpc', '--http2-prior-knowledge', ...args], { timeout: 20_000, env: { ...process.env, NO_COLOR: '1' } });

    it('lists the services over v1 and v1alpha', async () => {
      const v1Out = await curl('--list-services', base());
      expect(v1Out.stdout.trim().split('\n').sort()).toEqual(EXPECTED_SERVICES);
      const alphaOut = await curl('--reflect-protocol', 'grpc-v1alpha', '--list-services', base());
      expect(alphaOut.stdout.trim().split('\n').sort()).toEqual(EXPECTED_SERVICES);
    });

    it('lists the methods', async () => {
      const { stdout } = await curl('--list-methods', base());
      const methods = stdout.trim().split('\n');
      expect(methods).toEqual(
        expect.arrayContaining([
          'publishing.v1.ConnectionService/ListConnections',
          'publishing.v1.WebhookService/CreateWebhook',
          'grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
        ]),
      );
    });

    it('calls ListConnections with an API key, building the request from reflection', async () => {
      const tenant = await t.tenant();
      const { stdout } = await curl(
        '-H',
        `authorization: Bearer ${tenant.apiKey}`,
        '-d',
        '{"pageSize": 10}',
        `${base()}/publishing.v1.ConnectionService/ListConnections`,
      );
      const body = JSON.parse(stdout) as { connections?: unknown[]; registry?: { slug?: string }[]; connectableToolkits?: string[] };
      expect(body.connections ?? []).toEqual([]);
      expect(body.registry?.map((toolkit) => toolkit.slug)).toEqual(expect.arrayContaining(['instagram', 'linkedin']));
      expect(body.connectableToolkits).toContain('instagram');
    });

    it('still refuses the call itself without a key', async () => {
      await expect(curl(`${base()}/publishing.v1.ConnectionService/ListConnections`)).rejects.toMatchObject({
        stderr: expect.stringMatching(/unauthenticated/i),
      });
    });
  });

  // Registered only where grpcurl was built: the Go module proxy is not a dependency of the suite.
  if (existsSync(GRPCURL)) {
    describe('with grpcurl (no schema files: reflection only)', () => {
      const address = () => `127.0.0.1:${t.app.port}`;
      const grpcurl = (...args: string[]) => run(GRPCURL, ['-plaintext', ...args], { timeout: 20_000 });

      it('lists the services', async () => {
        const { stdout } = await grpcurl(address(), 'list');
        expect(stdout.trim().split('\n').sort()).toEqual(EXPECTED_SERVICES);
      });

      it('calls ListConnections with an API key', async () => {
        const tenant = await t.tenant();
        const { stdout } = await grpcurl('-H', `authorization: Bearer ${tenant.apiKey}`, '-d', '{"pageSize": 10}', address(), 'publishing.v1.ConnectionService/ListConnections');
        const body = JSON.parse(stdout) as { registry?: { slug?: string }[] };
        expect(body.registry?.map((toolkit) => toolkit.slug)).toEqual(expect.arrayContaining(['instagram', 'linkedin']));
      });

      it('decodes the ErrorInfo of a refusal: its stable reason is readable', async () => {
        const tenant = await t.tenant();
        const refused = grpcurl(
          '-format-error',
          '-H',
          `authorization: Bearer ${tenant.apiKey}`,
          '-d',
          '{"url": "http://hooks.example.com/in"}',
          address(),
          'publishing.v1.WebhookService/CreateWebhook',
        );
        // grpcurl exits non-zero and writes the status to stderr.
        const failure = (await refused.then(
          () => null,
          (error: unknown) => error,
        )) as { stderr: string } | null;
        expect(failure).not.toBeNull();
        const status = JSON.parse(failure!.stderr) as { code: number; details?: { '@type': string; reason?: string; domain?: string }[] };
        expect(status.code).toBe(3);
        expect(status.details).toEqual([
          expect.objectContaining({ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'WEBHOOK_URL_NOT_HTTPS', domain: 'publishing.example' }),
        ]);
      });
    });
  }
});
