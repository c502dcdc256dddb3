#!/bin/sh
# Lints the package as it would be published: one `npm pack` (the prepack builds dist/ and the
# prebuilt binaries), then publint and @arethetypeswrong/cli on that tarball.
#
# attw runs with the esm-only profile: flocklease is ESM only ("type": "module", import conditions
# only), so it checks resolution for ESM code under moduleResolution node16/nodenext and bundler, and
# skips node10 (no exports map support) and "node16 from CJS", where an ESM-only package is by design
# reachable only through import() (or require(esm) on Node >= 20.19), which attw reports as a problem.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
npm pack --silent --pack-destination "$dir" >/dev/null
tarball=$(ls "$dir"/*.tgz)
publint run --strict "$tarball"
attw --profile esm-only "$tarball"
