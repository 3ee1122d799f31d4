import { readFileSync } from 'node:fs';
import path from 'node:path';

let cached: string | undefined;

/**
 * The OpenAPI document written by scripts/generate-openapi.ts, read once. It is generated
 * output next to the descriptors (src/gen), so a missing file means generation did not run.
 */
export function openApiDocument(): string {
  if (cached === undefined) {
    const file = path.join(__dirname, '../../gen/openapi.json');
    try {
      cached = readFileSync(file, 'utf8');
    } catch (error) {
      throw new Error(`${file} is missing; run npm run generate`, { cause: error });
    }
  }
  return cached;
}
