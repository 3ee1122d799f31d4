/**
 * Writes src/gen/openapi.json, the OpenAPI document of the REST API, from the generated
 * descriptors. Runs after `buf generate` (which cleans src/gen), as part of `npm run generate`.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { buildOpenApi } from '../src/server/openapi';
import { ConnectionService } from '../src/gen/publishing/v1/connection_service_pb';
import { WebhookService } from '../src/gen/publishing/v1/webhook_service_pb';
import { PostService } from '../src/gen/publishing/v1/post_service_pb';

// The services of PUBLIC_SERVICES in src/server/routes.ts, imported directly so generating
// does not load the whole server; test/openapi checks the two lists give the same document.
const document = buildOpenApi([ConnectionService, WebhookService, PostService]);
const target = path.join(__dirname, '../src/gen/openapi.json');
writeFileSync(target, `${JSON.stringify(document, null, 2)}\n`);
console.log(`wrote ${path.relative(process.cwd(), target)}`);
