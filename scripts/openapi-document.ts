/**
 * The OpenAPI document as `npm run generate` writes it to src/gen/openapi.json: built from
 * descriptors that `buf build` compiles from proto/ with their source code info, so every
 * operation, parameter and field carries the proto's own comment. (The descriptors embedded
 * in src/gen have none: protoc-gen-es strips it.)
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { createFileRegistry, fromBinary, type DescService } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { buildOpenApi } from '../src/server/rest/openapi';
import { ConnectionService } from '../src/gen/publishing/v1/connection_service_pb';
import { WebhookService } from '../src/gen/publishing/v1/webhook_service_pb';
import { PostService } from '../src/gen/publishing/v1/post_service_pb';

const ROOT = path.join(__dirname, '..');

// The services of PUBLIC_SERVICES in src/server/routes.ts, named through their generated
// descriptors so generating does not load the whole server; test/openapi checks both lists
// document the same routes.
const SERVICES = [ConnectionService, WebhookService, PostService];

/** The public services as compiled by `buf build`, comments included. */
export function servicesWithComments(): DescService[] {
  const image = execFileSync(path.join(ROOT, 'node_modules/.bin/buf'), ['build', '--as-file-descriptor-set', '-o', '-'], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
  });
  const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, image));
  return SERVICES.map((service) => {
    const described = registry.getService(service.typeName);
    if (!described) throw new Error(`buf build produced no ${service.typeName}`);
    return described;
  });
}

export function generatedOpenApi(): object {
  return buildOpenApi(servicesWithComments());
}
