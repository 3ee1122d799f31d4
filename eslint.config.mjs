// Lint rules that catch at lint time what would otherwise surface at run or bundle time.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { fileURLToPath } from 'node:url';
import importX, { createNodeResolver } from 'eslint-plugin-import-x';
import { cyclesPlugin } from './eslint/cycles.mjs';

export default tseslint.config(
  { ignores: ['node_modules/', 'src/gen/', '.tools/', '.data/', 'coverage/', 'dist/', 'jest.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { 'import-x': importX, cycles: cyclesPlugin },
    // Cycles matter in our own modules; parsing bundled dependencies (PGlite's dist) only costs time.
    settings: {
      'import-x/ignore': ['node_modules'],
      // Imports are written without extensions; resolve them to the .ts sources.
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js', '.json'] })],
      // Without these, dependencies are not parsed as TypeScript and no cycle is ever seen;
      // the parser is TypeScript's with type-only imports read as imports (eslint/cycles.mjs).
      'import-x/extensions': ['.ts', '.js'],
      'import-x/parsers': { [fileURLToPath(new URL('./eslint/cycles.mjs', import.meta.url))]: ['.ts'] },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      // import-x's no-cycle with type-only imports counted: a type import couples two modules too.
      'cycles/no-cycle': ['error', { ignoreExternal: true }],
      // URL validation and the hostile-input suites match control characters on purpose.
      'no-control-regex': 'off',
    },
  },
  {
    // Each folder under src/ is a module with one door, its index.ts: another module's files
    // are reached through it, so what a module keeps to itself can change without notice.
    files: ['src/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\./)+(?!gen/|workflows/)[^./][^/]*/',
              message: "Import another module through its index.ts (e.g. '../db'), not one of its files.",
            },
          ],
        },
      ],
    },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: only the workflow API, types, and pure constants.
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^node:', message: 'Node built-ins are not available in workflow code.' },
            { regex: '^@temporalio/(?!workflow$)', message: 'Workflow code imports only @temporalio/workflow.' },
            { regex: '^(?!@temporalio/workflow$|\\./|\\.\\./src/)', message: 'Workflow code imports only @temporalio/workflow, ./ modules and types.' },
          ],
        },
      ],
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^\\.\\./src/', allowTypeImports: true, message: 'Workflow code may import only types from src/.' }] },
      ],
    },
  },
  {
    files: ['**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: { globals: { URL: 'readonly', console: 'readonly', process: 'readonly' } },
  },
);
