#!/bin/sh
# Installs from Debian what the tests need and a fresh machine lacks, and nothing else:
#   prebuild  gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, musl-tools, musl-dev:arm64: `npm pack`
#             cross-builds the prebuilt binaries with them (scripts/prebuild.mjs; the tarball test packs)
#   etcd      etcd-server and etcd-client (3.4): the Ticketing cluster tests, demo and benchmark
#             (etcdctl makes the secure cluster's users and roles)
#   redis     redis-server: the Ticketing benchmark's Redis side (its quick run is a test)
#   prometheus  prometheus, for its promtool: the Ticketing metrics test lints a real /metrics scrape
#   chromium  chromium: the Ticketing console's browser tests drive it with playwright-core (which
#             downloads no browser of its own)
#   bench     stress-ng and strace: `npm run bench:busy` and `node bench/syscalls.mjs` (no test needs
#             them, so only when asked)
# `sh scripts/setup.sh` installs the first five; `sh scripts/setup.sh etcd` only that one.
# Idempotent and quiet when everything is there. Installing needs root and apt-get; without them it
# says what is missing in one line each and exits 0 (the cluster and browser tests then skip,
# saying why).
# No service starts: the install runs under a policy-rc.d that forbids it (redis-server,
# etcd-server and prometheus ship init scripts), and the previous policy is put back. Every apt
# step is bounded.
set -u

components=${*:-prebuild etcd redis prometheus chromium}
need=""
for component in $components; do
  case $component in
    prebuild)
      command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need="$need gcc-aarch64-linux-gnu"
      # Its C library headers are only a recommendation of the compiler's package (not installed).
      [ -e /usr/aarch64-linux-gnu/include/stdio.h ] || need="$need libc6-dev-arm64-cross"
      command -v musl-gcc >/dev/null 2>&1 || need="$need musl-tools"
      # Both halves of musl-dev:arm64: a removed package can leave the library link behind.
      [ -e /usr/lib/aarch64-linux-musl/libc.so ] && [ -e /usr/include/aarch64-linux-musl/stdio.h ] ||
        need="$need musl-dev:arm64"
      ;;
    etcd)
      command -v etcd >/dev/null 2>&1 || need="$need etcd-server"
      command -v etcdctl >/dev/null 2>&1 || need="$need etcd-client"
      ;;
    redis) command -v redis-server >/dev/null 2>&1 || need="$need redis-server" ;;
    prometheus) command -v promtool >/dev/null 2>&1 || need="$need prometheus" ;;
    chromium) [ -x /usr/bin/chromium ] || need="$need chromium" ;;
    bench)
      command -v stress-ng >/dev/null 2>&1 || need="$need stress-ng"
      command -v strace >/dev/null 2>&1 || need="$need strace"
      ;;
    *) echo "setup: unknown component $component (prebuild, etcd, redis, prometheus, chromium, bench)" >&2; exit 64 ;;
  esac
done
[ -z "$need" ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing Debian packages:$need (installing them needs root and apt-get)" >&2
  exit 0
fi

policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "$policy" ]; then
  saved=$(mktemp)
  cp -p "$policy" "$saved"
fi
restore_policy() {
  if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
}
trap restore_policy EXIT
trap 'exit 130' INT TERM
printf '#!/bin/sh\n# scripts/setup.sh: no service starts during this install\nexit 101\n' > "$policy"
chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
case $need in
  *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64 ;;
esac
install() {
  # shellcheck disable=SC2086 # $need is a list of package names
  timeout 300 apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $need >/dev/null
}
# A fresh machine's package lists are missing or old (and a new foreign architecture has none).
timeout 300 apt-get update -qq >/dev/null || echo "setup: apt-get update failed; trying the install anyway" >&2
if ! install; then
  echo "setup: apt-get install$need failed" >&2
  exit 1
fi
# The packages' own services never started (policy-rc.d); say so if some other one is running.
for daemon in etcd redis-server prometheus; do
  if pgrep -x "$daemon" >/dev/null 2>&1; then
    echo "setup: note: a $daemon process is running (not started by this script): tests start their own" >&2
  fi
done
exit 0
