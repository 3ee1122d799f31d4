import path from 'node:path';
import { execFile } from 'node:child_process';

/**
 * The repository's own ESLint configuration keeps each module behind its index.ts: these
 * lint probe files placed in modules and show the rule fires past a door and only there.
 * ESLint runs in a process of its own: it loads the ESM configuration by dynamic import,
 * which jest's module sandbox does not allow.
 */
const ROOT = path.resolve(__dirname, '../..');

const LINT = `
import { ESLint } from 'eslint';
const probes = JSON.parse(process.argv[1]);
const answers = [];
for (const { code, file } of probes) {
  const eslint = new ESLint({
    cwd: process.cwd(),
    // A probe is not on disk, so it is linted without type information; the rules that need it are off.
    overrideConfig: {
      files: [file],
      languageOptions: { parserOptions: { projectService: false } },
      rules: { '@typescript-eslint/no-floating-promises': 'off', '@typescript-eslint/consistent-type-imports': 'off', 'cycles/no-cycle': 'off' },
    },
  });
  const [result] = await eslint.lintText(code, { filePath: file });
  answers.push(result.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message));
}
process.stdout.write(JSON.stringify(answers));
`;

function lint(probes: { code: string; file: string }[]): Promise<string[][]> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', LINT, JSON.stringify(probes)], { cwd: ROOT }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`));
      else resolve(JSON.parse(stdout) as string[][]);
    });
  });
}

it('refuses an import past a module’s index.ts, from a module or a folder nested in one, and allows the doors', async () => {
  const [pastDoor, nested, doors] = await lint([
    { file: 'src/webhooks/door-probe.ts', code: "export { isUuid } from '../db/ids';\n" },
    { file: 'src/connections/providers/door-probe.ts', code: "export { isUuid } from '../../db/ids';\n" },
    {
      file: 'src/webhooks/door-probe.ts',
      code: [
        "export { isUuid } from '../db';",
        "export { validateEndpointUrl } from './endpoint-url';",
        "export { WebhookService } from '../gen/publishing/v1/webhook_service_pb';",
        "export { MAX_ATTEMPTS } from '../../workflows/policy';",
        '',
      ].join('\n'),
    },
  ]);
  expect(pastDoor).toEqual([
    "'../db/ids' import is restricted from being used by a pattern. Import another module through its index.ts (e.g. '../db'), not one of its files.",
  ]);
  expect(nested).toHaveLength(1);
  expect(doors).toEqual([]);
});
