import { toBinary, type DescEnum, type DescExtension, type DescFile, type DescMessage, type DescService } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { Code, type ServiceImpl } from '@connectrpc/connect';
import { ServerReflection as ServerReflectionV1 } from '../../gen/grpc/reflection/v1/reflection_pb';
import { ServerReflection as ServerReflectionV1alpha } from '../../gen/grpc/reflection/v1alpha/reflection_pb';

/**
 * gRPC server reflection (grpc.reflection.v1 and the older v1alpha that some clients
 * still ask for), so `buf curl` and grpcurl can call the server without schema files.
 * Answers come from the descriptors embedded in the generated code: the files that
 * declare the served services and, transitively, everything they import.
 */
export const REFLECTION_SERVICES = [ServerReflectionV1, ServerReflectionV1alpha] as const;

/** What a request asks, in the shape v1 and v1alpha share. */
interface ReflectionRequest {
  messageRequest:
    | { case: 'fileByFilename' | 'fileContainingSymbol' | 'allExtensionNumbersOfType' | 'listServices'; value: string }
    | { case: 'fileContainingExtension'; value: { containingType: string; extensionNumber: number } }
    | { case: undefined; value?: undefined };
}

/** The answer, in the shape v1 and v1alpha share (plain init objects). */
type ReflectionAnswer =
  | { case: 'fileDescriptorResponse'; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: 'allExtensionNumbersResponse'; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: 'listServicesResponse'; value: { service: { name: string }[] } }
  | { case: 'errorResponse'; value: { errorCode: number; errorMessage: string } };

function error(code: Code, message: string): ReflectionAnswer {
  return { case: 'errorResponse', value: { errorCode: code, errorMessage: message } };
}

/** Files, symbols and extensions reachable from the served services. */
class ReflectionIndex {
  private readonly files = new Map<string, DescFile>();
  private readonly symbols = new Map<string, DescFile>();
  private readonly messages = new Set<string>();
  /** Extendee type name → extension number → declaring file. */
  private readonly extensions = new Map<string, Map<number, DescFile>>();
  private readonly encoded = new Map<string, Uint8Array>();
  readonly serviceNames: string[];

  constructor(services: readonly DescService[]) {
    this.serviceNames = [...new Set(services.map((s) => s.typeName))].sort();
    for (const service of services) this.addFile(service.file);
  }

  private addFile(file: DescFile): void {
    if (this.files.has(file.proto.name)) return;
    this.files.set(file.proto.name, file);
    for (const dependency of file.dependencies) this.addFile(dependency);
    const scope = file.proto.package;
    this.addEnums(file, scope, file.enums);
    this.addMessages(file, file.messages);
    this.addExtensions(file, file.extensions);
    for (const service of file.services) {
      this.symbols.set(service.typeName, file);
      for (const method of service.methods) this.symbols.set(`${service.typeName}.${method.name}`, file);
    }
  }

  private addMessages(file: DescFile, messages: readonly DescMessage[]): void {
    for (const message of messages) {
      this.symbols.set(message.typeName, file);
      this.messages.add(message.typeName);
      for (const field of message.fields) this.symbols.set(`${message.typeName}.${field.name}`, file);
      for (const oneof of message.oneofs) this.symbols.set(`${message.typeName}.${oneof.name}`, file);
      this.addEnums(file, message.typeName, message.nestedEnums);
      this.addMessages(file, message.nestedMessages);
      this.addExtensions(file, message.nestedExtensions);
    }
  }

  /** Enum values are scoped like their enum's siblings (C++ scoping), as protobuf names them. */
  private addEnums(file: DescFile, scope: string, enums: readonly DescEnum[]): void {
    for (const e of enums) {
      this.symbols.set(e.typeName, file);
      for (const value of e.values) this.symbols.set(scope ? `${scope}.${value.name}` : value.name, file);
    }
  }

  private addExtensions(file: DescFile, extensions: readonly DescExtension[]): void {
    for (const extension of extensions) {
      this.symbols.set(extension.typeName, file);
      const byNumber = this.extensions.get(extension.extendee.typeName) ?? new Map<number, DescFile>();
      byNumber.set(extension.number, file);
      this.extensions.set(extension.extendee.typeName, byNumber);
    }
  }

  private bytesOf(file: DescFile): Uint8Array {
    let bytes = this.encoded.get(file.proto.name);
    if (!bytes) {
      bytes = toBinary(FileDescriptorProtoSchema, file.proto);
      this.encoded.set(file.proto.name, bytes);
    }
    return bytes;
  }

  /**
   * The file and its transitive imports, each once. The asked-for file is always sent
   * (as grpc-go does: an answer without it would be useless); an import already sent on
   * this stream is left out, which the protocol allows.
   */
  private withDependencies(file: DescFile, sent: Set<string>): ReflectionAnswer {
    const out: Uint8Array[] = [];
    const queue = [file];
    const seen = new Set<string>();
    while (queue.length > 0) {
      const current = queue.shift() as DescFile;
      if (seen.has(current.proto.name)) continue;
      seen.add(current.proto.name);
      if (current === file || !sent.has(current.proto.name)) {
        out.push(this.bytesOf(current));
        sent.add(current.proto.name);
      }
      queue.push(...current.dependencies);
    }
    return { case: 'fileDescriptorResponse', value: { fileDescriptorProto: out } };
  }

  answer(request: ReflectionRequest, sent: Set<string>): ReflectionAnswer {
    const asked = request.messageRequest;
    switch (asked.case) {
      case 'listServices':
        return { case: 'listServicesResponse', value: { service: this.serviceNames.map((name) => ({ name })) } };
      case 'fileByFilename': {
        const file = this.files.get(asked.value);
        return file ? this.withDependencies(file, sent) : error(Code.NotFound, `file not found: ${asked.value}`);
      }
      case 'fileContainingSymbol': {
        const symbol = asked.value.startsWith('.') ? asked.value.slice(1) : asked.value;
        const file = this.symbols.get(symbol);
        return file ? this.withDependencies(file, sent) : error(Code.NotFound, `symbol not found: ${asked.value}`);
      }
      case 'fileContainingExtension': {
        const { containingType, extensionNumber } = asked.value;
        const file = this.extensions.get(containingType)?.get(extensionNumber);
        return file
          ? this.withDependencies(file, sent)
          : error(Code.NotFound, `extension not found: ${containingType} field ${extensionNumber}`);
      }
      case 'allExtensionNumbersOfType': {
        if (!this.messages.has(asked.value)) return error(Code.NotFound, `type not found: ${asked.value}`);
        const numbers = [...(this.extensions.get(asked.value)?.keys() ?? [])].sort((a, b) => a - b);
        return { case: 'allExtensionNumbersResponse', value: { baseTypeName: asked.value, extensionNumber: numbers } };
      }
      default:
        return error(Code.InvalidArgument, 'the request names nothing to look up');
    }
  }
}

export interface ReflectionServices {
  v1: ServiceImpl<typeof ServerReflectionV1>;
  v1alpha: ServiceImpl<typeof ServerReflectionV1alpha>;
}

/**
 * Implementations of both reflection services over the given served services (pass
 * every service the router registers, the reflection services included, so that
 * list_services names them all).
 */
export function createReflectionServices(services: readonly DescService[]): ReflectionServices {
  const index = new ReflectionIndex(services);
  // One stream per client: files already sent on it are not sent again as imports.
  async function* serve<R extends ReflectionRequest & { host: string }>(requests: AsyncIterable<R>) {
    const sent = new Set<string>();
    for await (const request of requests) {
      yield { validHost: request.host, originalRequest: request, messageResponse: index.answer(request, sent) };
    }
  }
  return {
    v1: { serverReflectionInfo: (requests) => serve(requests) },
    v1alpha: { serverReflectionInfo: (requests) => serve(requests) },
  };
}
