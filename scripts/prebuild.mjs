#!/usr/bin/env node
// Builds the prebuilt binaries that `npm pack` ships (run by `prepack`), then checks each one.
//
//   node scripts/prebuild.mjs           build native/prebuilds/ unless it is up to date, then check it
//   node scripts/prebuild.mjs --check   only check native/prebuilds/
//
// Every target of native/binding.gyp is built with node-gyp for linux-x64 and linux-arm64, on glibc
// and on musl, in a scratch copy of native/. The layout is node-gyp-build's:
//   native/prebuilds/linux-<arch>/flocklease.napi.<libc>.node    the addon
//   native/prebuilds/linux-<arch>/<target>.napi.<libc>           each "type": "executable" target
//                                                               (static on glibc, see build())
// so src/native.ts finds an executable next to the addon it loaded, under the addon's tags.
//
// Toolchains come from Debian (`sh scripts/setup.sh prebuild` installs them); headers come from this machine's
// Node (never downloaded). glibc binaries are linked against old symbol versions (glibc-compat.c) so
// that they load on glibc 2.28; the check below fails if one needs a newer symbol.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const nativeDir = path.join(root, 'native');
const prebuildsDir = path.join(nativeDir, 'prebuilds');
/** The cache key of the last complete build (kept outside prebuilds/, so it is not packed). */
const keyFile = path.join(nativeDir, 'prebuilds.key');
const ADDON = 'flocklease';
const MAX_GLIBC = [2, 28];

// musl-tools' musl-gcc.specs for x86_64, retargeted at Debian's musl-dev:arm64 (a blank line ends each spec).
const MUSL_ARM64_SPECS = `%rename cpp_options old_cpp_options

*cpp_options:
-nostdinc -isystem /usr/include/aarch64-linux-musl -isystem include%s %(old_cpp_options)

*cc1:
%(cc1_cpu) -nostdinc -isystem /usr/include/aarch64-linux-musl -isystem include%s

*link_libgcc:
-L/usr/lib/aarch64-linux-musl -L .%s

*libgcc:
libgcc.a%s %:if-exists(libgcc_eh.a%s)

*startfile:
%{!shared: /usr/lib/aarch64-linux-musl/Scrt1.o} /usr/lib/aarch64-linux-musl/crti.o crtbeginS.o%s

*endfile:
crtendS.o%s /usr/lib/aarch64-linux-musl/crtn.o

*link:
-dynamic-linker /lib/ld-musl-aarch64.so.1 -nostdlib %{shared:-shared} %{static:-static} %{rdynamic:-export-dynamic}
`;

/** What each build targets: `cc` is the compiler driver (it also links: the addon is C only). */
const TARGETS = [
  { arch: 'x64', libc: 'glibc', cc: ['gcc'], machine: 'Advanced Micro Devices X86-64' },
  { arch: 'x64', libc: 'musl', cc: ['musl-gcc'], machine: 'Advanced Micro Devices X86-64' },
  { arch: 'arm64', libc: 'glibc', cc: ['aarch64-linux-gnu-gcc'], machine: 'AArch64' },
  { arch: 'arm64', libc: 'musl', cc: ['aarch64-linux-gnu-gcc', '-specs', '<musl-arm64.specs>'], machine: 'AArch64' },
];
const LIBC_INTERPRETER = {
  glibc: { x64: '/lib64/ld-linux-x86-64.so.2', arm64: '/lib/ld-linux-aarch64.so.1' },
  musl: { x64: '/lib/ld-musl-x86_64.so.1', arm64: '/lib/ld-musl-aarch64.so.1' },
};
/** The wrapped symbols of glibc-compat.c. */
const GLIBC_WRAPPED = ['fstat', 'fstat64', 'lstat', 'lstat64', 'pthread_create', 'pthread_attr_setstacksize'];

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

function run(file, args, options = {}) {
  return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options });
}

/** The files node-gyp builds from: binding.gyp and the C sources and headers under native/ (paths
 * relative to it, `/`-separated). */
function sourceFiles() {
  return fs
    .readdirSync(nativeDir, { recursive: true })
    .map((name) => name.split(path.sep).join('/'))
    .filter(
      (name) => name === 'binding.gyp' || (/\.[ch]$/.test(name) && !/^(build|prebuilds|node_modules)\//.test(name)),
    )
    .sort();
}

function cacheKey() {
  const hash = createHash('sha256');
  for (const name of sourceFiles())
    hash
      .update(name)
      .update('\0')
      .update(fs.readFileSync(path.join(nativeDir, name)));
  for (const file of [import.meta.filename, path.join(import.meta.dirname, 'glibc-compat.c')]) {
    hash.update(fs.readFileSync(file));
  }
  return hash.digest('hex');
}

/** The C sources of an executable target of binding.gyp (which is plain JSON here). */
function executableSources(targetName) {
  const gyp = JSON.parse(fs.readFileSync(path.join(nativeDir, 'binding.gyp'), 'utf8'));
  const target = gyp.targets.find((t) => t.target_name === targetName && t.type === 'executable');
  if (target === undefined) fail(`binding.gyp has no executable target ${targetName}`);
  return target.sources.map((source) => path.join(nativeDir, source));
}

/** node-gyp as npm ships it (npm names it in npm_config_node_gyp for its scripts), else the one on PATH. */
function nodeGyp() {
  const bundled = [
    process.env.npm_config_node_gyp,
    path.resolve(path.dirname(process.execPath), '../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'),
  ].find((file) => file && fs.existsSync(file));
  return bundled ? [process.execPath, bundled] : ['node-gyp'];
}

/** This machine's Node headers: node-gyp must never download them. */
function nodeDir() {
  const dir = path.resolve(path.dirname(process.execPath), '..');
  if (!fs.existsSync(path.join(dir, 'include', 'node', 'node_api.h'))) {
    fail(`no Node headers in ${dir}/include/node (install Node with its headers; they are never downloaded)`);
  }
  return dir;
}

function build() {
  if (os.platform() !== 'linux' || os.arch() !== 'x64') fail('the prebuilds are cross-built on linux-x64 only');
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'flocklease-prebuild-'));
  const staging = path.join(scratch, 'prebuilds');
  try {
    const specs = path.join(scratch, 'musl-arm64.specs');
    fs.writeFileSync(specs, MUSL_ARM64_SPECS);
    const nodedir = nodeDir();
    for (const target of TARGETS) {
      const cc = target.cc.map((arg) => (arg === '<musl-arm64.specs>' ? specs : arg)).join(' ');
      const work = path.join(scratch, `${target.arch}-${target.libc}`);
      fs.mkdirSync(work);
      for (const name of sourceFiles()) {
        fs.mkdirSync(path.dirname(path.join(work, name)), { recursive: true });
        fs.copyFileSync(path.join(nativeDir, name), path.join(work, name));
      }
      let ldflags = '';
      if (target.libc === 'glibc') {
        const compat = path.join(work, 'glibc-compat.o');
        run(target.cc[0], ['-O2', '-fPIC', '-c', path.join(import.meta.dirname, 'glibc-compat.c'), '-o', compat]);
        ldflags = `${compat} ${GLIBC_WRAPPED.map((name) => `-Wl,--wrap=${name}`).join(' ')}`;
      }
      const env = { ...process.env, CC: cc, CXX: cc, LINK: cc, LDFLAGS: ldflags };
      const [gyp, ...gypArgs] = nodeGyp();
      try {
        run(gyp, [...gypArgs, 'rebuild', `--arch=${target.arch}`, `--nodedir=${nodedir}`], { cwd: work, env });
      } catch (error) {
        const output = `${error.stdout ?? ''}${error.stderr ?? ''}`;
        fail(`node-gyp failed for linux-${target.arch} ${target.libc} (${cc}): ${error.message}\n${output}`);
      }
      const out = path.join(staging, `linux-${target.arch}`);
      fs.mkdirSync(out, { recursive: true });
      const release = path.join(work, 'build', 'Release');
      for (const name of fs.readdirSync(release)) {
        const file = path.join(release, name);
        const stat = fs.statSync(file);
        if (!stat.isFile()) continue;
        if (name.endsWith('.node')) {
          fs.copyFileSync(file, path.join(out, `${name.slice(0, -'.node'.length)}.napi.${target.libc}.node`));
        } else if (stat.mode & 0o111) {
          const dest = path.join(out, `${name}.napi.${target.libc}`);
          // glibc's start files tie a dynamic executable to the glibc it was built on (GLIBC_2.34's
          // __libc_start_main here), which no wrapper can undo: link it statically instead, so it
          // needs no glibc at all. musl has no symbol versions: node-gyp's dynamic build is kept.
          if (target.libc === 'glibc') run(target.cc[0], ['-O2', '-static', '-o', dest, ...executableSources(name)]);
          else fs.copyFileSync(file, dest);
          fs.chmodSync(dest, 0o755);
        }
      }
    }
    fs.rmSync(prebuildsDir, { recursive: true, force: true });
    fs.renameSync(staging, prebuildsDir);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Orders glibc versions given as arrays of numbers ([2, 3, 2] for 2.3.2). */
function compareVersions(a, b) {
  return (a[0] ?? 0) - (b[0] ?? 0) || (a[1] ?? 0) - (b[1] ?? 0) || (a[2] ?? 0) - (b[2] ?? 0);
}

const parseVersion = (text) => text.split('.').map(Number);

/** Highest GLIBC_x.y[.z] among the versions the binary needs (from its .gnu.version_r section). */
function highestGlibc(file) {
  const needed = run('readelf', ['-V', '-W', file]).matchAll(/Name: GLIBC_([\d.]+)/g);
  return [...needed]
    .map((m) => parseVersion(m[1]))
    .sort(compareVersions)
    .at(-1);
}

/** The imported symbols whose glibc version is newer than MAX_GLIBC. */
function symbolsTooNew(file) {
  const imports = run('objdump', ['-T', file]).matchAll(/GLIBC_([\d.]+)\)?\s+(\S+)$/gm);
  return [...imports].filter((m) => compareVersions(parseVersion(m[1]), MAX_GLIBC) > 0).map((m) => m[2]);
}

/** Checks every binary in native/prebuilds/ against the target its path names; returns one line per binary. */
function check() {
  const problems = [];
  const lines = [];
  for (const target of TARGETS) {
    const dir = path.join(prebuildsDir, `linux-${target.arch}`);
    const names = fs.existsSync(dir) ? fs.readdirSync(dir).filter((name) => name.includes(`.napi.${target.libc}`)) : [];
    const addon = `${ADDON}.napi.${target.libc}.node`;
    if (!names.includes(addon)) problems.push(`missing ${dir}/${addon}`);
    for (const name of names) {
      const file = path.join(dir, name);
      const header = run('readelf', ['-h', '-W', file]);
      const machine = /Machine:\s+(.*)/.exec(header)?.[1]?.trim();
      if (machine !== target.machine) problems.push(`${file}: machine ${machine}, expected ${target.machine}`);
      const dynamic = run('readelf', ['-d', '-W', file]);
      const needed = [...dynamic.matchAll(/\(NEEDED\)\s+Shared library: \[(.*)\]/g)].map((m) => m[1]);
      const libc = target.libc === 'glibc' ? 'libc.so.6' : 'libc.so';
      const isExecutable = !name.endsWith('.node');
      const isStatic = isExecutable && target.libc === 'glibc';
      if (isStatic) {
        if (needed.length > 0) problems.push(`${file}: needs [${needed.join(', ')}], expected a static executable`);
        if (/program interpreter/.test(run('readelf', ['-l', '-W', file]))) problems.push(`${file}: not static`);
      } else if (!needed.includes(libc)) {
        problems.push(`${file}: needs [${needed.join(', ')}], expected ${libc}`);
      }
      if (isExecutable && !isStatic) {
        const interp = /Requesting program interpreter: (.*)\]/.exec(run('readelf', ['-l', '-W', file]))?.[1];
        const expected = LIBC_INTERPRETER[target.libc][target.arch];
        if (interp !== expected) problems.push(`${file}: interpreter ${interp}, expected ${expected}`);
      }
      const glibc = highestGlibc(file);
      if (target.libc === 'musl' && glibc) problems.push(`${file}: a musl binary needs GLIBC_${glibc.join('.')}`);
      if (target.libc === 'glibc' && glibc && compareVersions(glibc, MAX_GLIBC) > 0) {
        const newer = symbolsTooNew(file).join(', ');
        const limit = MAX_GLIBC.join('.');
        problems.push(`${file}: needs GLIBC_${glibc.join('.')} (${newer}), over ${limit}: wrap in glibc-compat.c`);
      }
      const size = fs.statSync(file).size;
      const highest = glibc ? `GLIBC_${glibc.join('.')}` : '-';
      lines.push(`${path.relative(root, file)}  ${size} B  ${machine}  ${target.libc}  ${highest}`);
    }
  }
  if (problems.length > 0) fail(`check failed:\n  ${problems.join('\n  ')}`);
  return lines;
}

if (!process.argv.includes('--check')) {
  const key = cacheKey();
  const current = fs.existsSync(keyFile) && fs.readFileSync(keyFile, 'utf8') === key && fs.existsSync(prebuildsDir);
  if (!current) {
    fs.rmSync(keyFile, { force: true });
    build();
    check();
    fs.writeFileSync(keyFile, key);
  }
}
for (const line of check()) console.log(line);
