#!/usr/bin/env node
// No import cycles, type-only imports included: every static `import … from` and `export … from`
// of the files under the folders named (TypeScript and JavaScript), parsed by TypeScript's own
// parser, resolved as Node resolves this repository's relative specifiers and `#kernel`; then
// every strongly connected component of more than one file (or a file importing itself) is a
// cycle. A dynamic `import('…')` and a type's `import('…')` count too: a cycle through them is
// still two files that each need the other.
//
//   node scripts/check-cycles.mjs src ticketing/src bench scripts test
//
// Exit 1 with one line per cycle, 0 when there is none. `npm run lint` runs it.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const root = path.resolve(import.meta.dirname, '..');
const SOURCE = /\.(ts|mts|cts|mjs|cjs|js)$/;
const SKIP = new Set(['node_modules', 'dist', 'build', 'out', 'coverage', '.test-tmp']);
/** The package imports this repository uses (ticketing/package.json), mapped to their sources. */
const PACKAGE_IMPORTS = { '#kernel': 'src/kernel/index.ts', '#kernel/flags': 'src/kernel/flags.ts' };

function filesUnder(dir) {
  const found = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...filesUnder(full));
    else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) found.push(full);
  }
  return found;
}

/** The specifiers a file imports: static imports and re-exports (`import type` and `export type`
 * included), and every `import('…')` with a literal specifier, in code or in a type. */
function specifiersOf(file) {
  const source = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const specifiers = [];
  const literal = (node) => {
    if (node !== undefined && ts.isStringLiteral(node)) specifiers.push(node.text);
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) literal(node.moduleSpecifier);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword)
      literal(node.arguments[0]);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) literal(node.argument.literal);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return specifiers;
}

/** The file a specifier names, or undefined for a package or a built file outside the sources. */
function resolve(from, specifier) {
  if (specifier in PACKAGE_IMPORTS) return path.join(root, PACKAGE_IMPORTS[specifier]);
  if (!specifier.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(from), specifier);
  const candidates = [
    base,
    base.replace(/\.js$/, '.ts'),
    base.replace(/\.mjs$/, '.mts'),
    `${base}.ts`,
    `${base}.mjs`,
    `${base}.js`,
    path.join(base, 'index.ts'),
    path.join(base, 'index.mjs'),
    path.join(base, 'index.js'),
  ];
  return candidates.find((file) => fs.existsSync(file) && fs.statSync(file).isFile());
}

/** Tarjan's strongly connected components. */
function components(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  let next = 0;
  const visit = (node) => {
    index.set(node, next);
    low.set(node, next++);
    stack.push(node);
    onStack.add(node);
    for (const to of graph.get(node) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(node, Math.min(low.get(node), low.get(to)));
      } else if (onStack.has(to)) low.set(node, Math.min(low.get(node), index.get(to)));
    }
    if (low.get(node) === index.get(node)) {
      const component = [];
      let member;
      do {
        member = stack.pop();
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      found.push(component);
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

const folders = process.argv.slice(2);
if (folders.length === 0) {
  console.error('usage: node scripts/check-cycles.mjs <folder>...');
  process.exit(64);
}
const graph = new Map();
const pending = folders.flatMap((folder) => filesUnder(path.resolve(root, folder)));
// Files the named folders import from elsewhere (e.g. the kernel, from ticketing/src) are followed
// too: a cycle may pass through them.
while (pending.length > 0) {
  const file = pending.pop();
  if (graph.has(file)) continue;
  const targets = specifiersOf(file)
    .map((specifier) => resolve(file, specifier))
    .filter((target) => target !== undefined);
  graph.set(file, new Set(targets));
  pending.push(...targets);
}
const cycles = components(graph).filter((c) => c.length > 1 || graph.get(c[0]).has(c[0]));
for (const cycle of cycles) {
  const names = cycle.map((file) => path.relative(root, file)).sort();
  console.error(`import cycle among ${names.length} files: ${names.join(', ')}`);
}
process.exit(cycles.length > 0 ? 1 : 0);
