#!/bin/sh
# Installs the Debian packages that `npm pack` (scripts/prebuild.mjs) needs to cross-build the prebuilt
# binaries: the aarch64 glibc cross compiler, musl-gcc for x86_64, and musl's arm64 headers and libraries
# (Debian has no aarch64 musl cross compiler; the aarch64 gcc drives them through a specs file).
# Idempotent and quiet: does nothing when everything is there. Needs root (CI runs as root).
set -eu
need=""
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need="$need gcc-aarch64-linux-gnu"
command -v musl-gcc >/dev/null 2>&1 || need="$need musl-tools"
[ -e /usr/lib/aarch64-linux-musl/libc.so ] || need="$need musl-dev:arm64"
[ -z "$need" ] && exit 0
export DEBIAN_FRONTEND=noninteractive
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # $need is a list of package names
apt-get install -y -qq --no-install-recommends $need >/dev/null
