import { readFileSync } from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';

/**
 * The repository's ESLint configuration refuses an import circle, type-only imports counted:
 * a type import couples two modules as much as a value import does. These lint a module's
 * own file with one import added that closes a circle through another module, and the file
 * as it is. ESLint runs in a process of its own (it loads its ESM configuration by dynamic
 * import, which jest's module sandbox does not allow).
 */
const ROOT = path.resolve(__dirname, '../..');

const LINT = `
import { ESLint } from 'eslint';
const probes = JSON.parse(process.argv[1]);
const answers = [];
const eslint = new ESLint({
  cwd: process.cwd(),
  overrideConfig: {
    languageOptions: { parserOptions: { projectService: false } },
    rules: { '@typescript-eslint/no-floating-promises': 'off', '@typescript-eslint/consistent-type-imports': 'off' },
  },
});
for (const { code, file } of probes) {
  const [result] = await eslint.lintText(code, { filePath: file });
  answers.push(result.messages.filter((m) => m.ruleId === 'cycles/no-cycle').map((m) => m.message));
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

it('refuses an import circle, a type-only import included, and passes the module as it is', async () => {
  const file = 'src/endpoints/plans.ts';
  const code = readFileSync(path.join(ROOT, file), 'utf8');
  const [typeOnly, value, asItIs] = await lint([
    { file, code: `${code}\nimport type { EventPublisher } from '../events';\nexport type Probe = EventPublisher;\n` },
    { file, code: `${code}\nimport { EventPublisher } from '../events';\nexport const probe = EventPublisher;\n` },
    { file, code },
  ]);
  expect(typeOnly).toEqual([expect.stringMatching(/^Dependency cycle via "\.\/[a-z-]+:\d+=>\.\.\/endpoints:\d+"$/)]);
  expect(value).toEqual(typeOnly);
  expect(asItIs).toEqual([]);
});
