import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Code } from '@connectrpc/connect';
import { ERRORS } from '../../src/errors';

describe("the README's error table", () => {
  it('lists exactly the stable codes of the catalog, with their HTTP status and gRPC code', () => {
    const readme = readFileSync(path.resolve(__dirname, '../../README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Errors'), readme.indexOf('\n## ', readme.indexOf('## Errors') + 1));
    const rows = [...section.matchAll(/^\| `([A-Z0-9_]+)` \| (\d{3}) \| (\w+) \|$/gm)].map(([, code, status, grpc]) => [code, Number(status), grpc]);
    const catalog = Object.entries(ERRORS).map(([code, [grpc, status]]) => [code, status, Code[grpc]]);
    expect(rows).toEqual(catalog);
  });
});
