// Checks that no C source or header under native/ has more than MAX_CODE_LINES lines of code
// (blank lines and comments not counted): the C side's file size limit, as eslint's max-lines is
// the TypeScript side's. Exits 1 naming each file over it.
//   node scripts/check-native-size.mjs [dir]   (default: native/ beside this script)
import fs from 'node:fs';
import path from 'node:path';

const MAX_CODE_LINES = 700;
const SKIPPED = new Set(['build', 'prebuilds', 'node_modules']);

/** How many lines of `text` hold code: not blank, not only a comment (a string's `//` is code). */
function codeLines(text) {
  let count = 0;
  let inBlock = false;
  for (const line of text.split('\n')) {
    let code = false;
    for (let i = 0; i < line.length;) {
      if (inBlock) {
        const end = line.indexOf('*/', i);
        if (end < 0) break;
        inBlock = false;
        i = end + 2;
      } else if (line.startsWith('//', i)) {
        break;
      } else if (line.startsWith('/*', i)) {
        inBlock = true;
        i += 2;
      } else if (line[i] === '"' || line[i] === "'") {
        const quote = line[i];
        code = true;
        for (i++; i < line.length && line[i] !== quote; i++) if (line[i] === '\\') i++;
        i++;
      } else {
        if (!/\s/.test(line[i])) code = true;
        i++;
      }
    }
    if (code) count++;
  }
  return count;
}

function* sources(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIPPED.has(entry.name)) yield* sources(file);
    } else if (/\.[ch]$/.test(entry.name)) yield file;
  }
}

const root = path.resolve(process.argv[2] ?? path.join(import.meta.dirname, '..', 'native'));
const over = [];
for (const file of sources(root)) {
  const count = codeLines(fs.readFileSync(file, 'utf8'));
  if (count > MAX_CODE_LINES)
    over.push(`${path.relative(process.cwd(), file)}: ${count} lines of code (max ${MAX_CODE_LINES})`);
}
if (over.length > 0) {
  console.error(`C files over the size limit:\n${over.join('\n')}`);
  process.exit(1);
}
