/**
 * Where the native code is: the addon (native/src/, built by native/binding.gyp) and the executables
 * built beside it.
 *
 * node-gyp-build chooses, without building anything: a local build (`native/build/Release/`, made by a
 * clone's `npm ci` or by the install script when no prebuilt binary fits) first, else the prebuilt
 * binary shipped in `native/prebuilds/<platform>-<arch>/` for this C library (glibc, or musl on Alpine).
 * So the package works with install scripts disabled. scripts/prebuild.mjs makes the prebuilds.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseUnsupportedError } from './port/errors.js';

const require = createRequire(import.meta.url);
const nodeGypBuild = require('node-gyp-build') as { path(dir: string): string };

/** native/, from src/ or dist/ alike. */
const nativeRoot = fileURLToPath(new URL('../native/', import.meta.url));

let addonFile: string | undefined;
let addon: unknown;
let loadError: unknown;
try {
  addonFile = nodeGypBuild.path(nativeRoot);
  addon = require(addonFile);
} catch (error) {
  loadError = error; // reported when the addon is used, not at import: MemoryLease and Ticketing need none
}

function unsupported(): LeaseUnsupportedError {
  const reason = loadError instanceof Error ? loadError.message.trim() : String(loadError);
  return new LeaseUnsupportedError(
    `the flocklease native addon did not load (${reason}); ` +
      'there is a prebuilt binary for linux-x64 and linux-arm64 (glibc and musl) only: elsewhere run ' +
      '`npm rebuild flocklease` with python3, make and a C compiler installed to build it from source',
    { cause: loadError },
  );
}

/** The loaded addon; throws LeaseUnsupportedError when it did not load. */
export function nativeAddon(): unknown {
  if (addonFile === undefined || addon === undefined) throw unsupported();
  return addon;
}

/** The directory the addon was loaded from. @public: test/package/tarball.test.ts calls it in the installed package. */
export function nativeDirectory(): string {
  if (addonFile === undefined) throw unsupported();
  return path.dirname(addonFile);
}

/**
 * The path of an executable target of native/binding.gyp, built for this platform with the addon: it
 * lies beside the addon and carries the addon's tags (`<name>` beside a local build's `flocklease.node`,
 * `<name>.napi.musl` beside a prebuilt `flocklease.napi.musl.node`).
 * @public: test/package/tarball.test.ts calls it in the installed package.
 */
export function nativeExecutable(name: string): string {
  if (addonFile === undefined) throw unsupported();
  const tags = path.basename(addonFile).split('.').slice(1, -1);
  return path.join(path.dirname(addonFile), [name, ...tags].join('.'));
}

/** The `flocklease run` supervisor (native/src/supervisor.c); LeaseUnsupportedError when it is missing. */
export function supervisorPath(): string {
  const file = nativeExecutable('flocklease-supervisor');
  if (!fs.existsSync(file)) {
    throw new LeaseUnsupportedError(`the flocklease supervisor ${file} is missing; run \`npm rebuild flocklease\``);
  }
  return file;
}
