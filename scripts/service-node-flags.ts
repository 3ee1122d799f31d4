import { readFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The Node flags the service runs with (`config.serviceNodeFlags` in package.json, which
 * `npm start` and `npm run worker` pass to Node), so that benchmarks and the fault script
 * measure the service as it is run.
 */
export function serviceNodeFlags(root: string): string[] {
  const manifest = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { config?: { serviceNodeFlags?: string } };
  return (manifest.config?.serviceNodeFlags ?? '').split(' ').filter(Boolean);
}
