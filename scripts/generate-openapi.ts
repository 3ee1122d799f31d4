/**
 * Writes src/gen/openapi.json, the OpenAPI document of the REST API (openapi-document.ts).
 * Runs after `buf generate` (which cleans src/gen), as part of `npm run generate`.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { generatedOpenApi } from './openapi-document';

const target = path.join(__dirname, '../src/gen/openapi.json');
writeFileSync(target, `${JSON.stringify(generatedOpenApi(), null, 2)}\n`);
console.log(`wrote ${path.relative(process.cwd(), target)}`);
