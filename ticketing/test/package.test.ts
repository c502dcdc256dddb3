/** What `npm pack` puts in @flocklease/ticketing's tarball: the console's page ships in it
 * (dist/console), built, and is found where the endpoint looks for it. */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from 'vitest';

const root = path.resolve(import.meta.dirname, '..');

test('the tarball holds the console: its page, stylesheet, icon and scripts, as built', () => {
  expect(existsSync(path.join(root, 'dist/console/index.html')), 'run npm run build first').toBe(true);
  const packed = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });
  const [info] = JSON.parse(packed.slice(packed.indexOf('[\n'))) as [{ files: Array<{ path: string }> }];
  const files = info.files.map((file) => file.path);
  const consoleFiles = files.filter((file) => file.startsWith('dist/console/'));
  const built = readdirSync(path.join(root, 'dist/console')).map((file) => `dist/console/${file}`);
  expect(built).toEqual(
    expect.arrayContaining(['index.html', 'console.css', 'favicon.svg', 'main.js'].map((f) => `dist/console/${f}`)),
  );
  expect(consoleFiles.sort()).toEqual(built.sort());
  // Only what the page serves: no sources, maps or declarations of the page's scripts.
  expect(consoleFiles.filter((file) => !/\.(html|css|svg|js)$/.test(file))).toEqual([]);
  expect(files.filter((file) => file.startsWith('console/'))).toEqual([]);
});
