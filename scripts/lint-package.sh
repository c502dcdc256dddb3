#!/bin/sh
# Lints the package as it would be published, from dist/ as it is built now (`npm run lint:package`
# builds first; `npm test` has built already): the prebuilt binaries (scripts/prebuild.mjs, as
# prepack would), one `npm pack`, then publint and @arethetypeswrong/cli on that tarball.
#
# The tarball and npm's account of it (pack.json) stay in node_modules/.cache/flocklease-pack/:
# test/package/tarball.test.ts installs that one while nothing it holds has changed since, so
# `npm test` packs once.
#
# attw runs with the esm-only profile: flocklease is ESM only ("type": "module", import conditions
# only), so it checks resolution for ESM code under moduleResolution node16/nodenext and bundler, and
# skips node10 (no exports map support) and "node16 from CJS", where an ESM-only package is by design
# reachable only through import() (or require(esm) on Node >= 20.19), which attw reports as a problem.
set -eu
cd "$(dirname "$0")/.."
dir=node_modules/.cache/flocklease-pack
rm -rf "$dir"
mkdir -p "$dir"
node scripts/prebuild.mjs >/dev/null
npm pack --silent --json --ignore-scripts --pack-destination "$dir" >"$dir/pack.json"
tarball=$(ls "$dir"/*.tgz)
publint run --strict "$tarball"
attw --profile esm-only "$tarball"
