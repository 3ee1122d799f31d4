// import-x's no-cycle, with type-only imports counted. The rule skips `import type` and
// specifiers marked `type`, both in the file it lints and in the modules it walks; but a
// type-only import still couples two modules (one cannot change without the other), and a
// circle hidden that way is still a circle. So the rule is given every import as a value
// import: the linted file's through its visitors, the walked modules' through the parser
// import-x reads them with (settings 'import-x/parsers').
import importX from 'eslint-plugin-import-x';
import * as typescriptParser from '@typescript-eslint/parser';

const asValue = (node) => {
  if (!node.source) return node;
  const kind = node.type === 'ImportDeclaration' ? 'importKind' : 'exportKind';
  return {
    ...node,
    [kind]: 'value',
    specifiers: (node.specifiers ?? []).map((s) => ({ ...s, [kind]: 'value' })),
  };
};

function markImportsAsValues(program) {
  for (const statement of program.body) {
    if (statement.type === 'ImportDeclaration') {
      statement.importKind = 'value';
      for (const s of statement.specifiers) if ('importKind' in s) s.importKind = 'value';
    } else if ((statement.type === 'ExportNamedDeclaration' || statement.type === 'ExportAllDeclaration') && statement.source) {
      statement.exportKind = 'value';
      for (const s of statement.specifiers ?? []) s.exportKind = 'value';
    }
  }
}

/** The parser import-x reads the walked modules with (this file's path names it): TypeScript's, its imports all values. */
export function parseForESLint(code, options) {
  const parsed = typescriptParser.parseForESLint(code, options);
  markImportsAsValues(parsed.ast);
  return parsed;
}

const noCycle = importX.rules['no-cycle'];

const noCycleCountingTypes = {
  meta: noCycle.meta,
  defaultOptions: noCycle.defaultOptions,
  create(context) {
    const visitors = noCycle.create(context);
    const wrapped = { ...visitors };
    for (const type of ['ImportDeclaration', 'ExportNamedDeclaration', 'ExportAllDeclaration']) {
      const visit = visitors[type];
      if (visit) wrapped[type] = (node) => visit(asValue(node));
    }
    return wrapped;
  },
};

export const cyclesPlugin = { meta: { name: 'cycles' }, rules: { 'no-cycle': noCycleCountingTypes } };
