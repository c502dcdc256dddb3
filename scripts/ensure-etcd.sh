#!/bin/sh
# Makes sure `etcd` (Debian's etcd-server, 3.4) is installed, for the Ticketing cluster tests.
# Exits 0 when etcd is on PATH afterwards; otherwise prints why on stderr and exits 1.
# Bounded: at most 240 + 180 + 240 s of apt-get.
# Never starts a system etcd: the install runs under a policy-rc.d that forbids service starts
# (the package ships /etc/init.d/etcd and etcd.service), and the previous policy is put back.
set -u

if command -v etcd >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-etcd: etcd is not installed, and installing etcd-server needs root" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-etcd: etcd is not installed, and there is no apt-get to install it" >&2
  exit 1
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
printf '#!/bin/sh\n# ensure-etcd.sh: no service starts during this install\nexit 101\n' > "$policy"
chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
apt_install() {
  timeout 240 apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold etcd-server
}
if ! apt_install; then
  # Only a machine whose package lists were never fetched needs this (slow) step.
  echo "ensure-etcd: install failed; running apt-get update once and retrying" >&2
  timeout 180 apt-get update -qq && apt_install
fi

if ! command -v etcd >/dev/null 2>&1; then
  echo "ensure-etcd: etcd-server did not install etcd" >&2
  exit 1
fi
# A system etcd would share no ports or data with the tests' clusters (free ports, temp dirs),
# but it must not run unnoticed: say so if one is up.
if pgrep -x etcd >/dev/null 2>&1; then
  echo "ensure-etcd: note: an etcd process is running (not started by this script):" >&2
  pgrep -a -x etcd >&2
fi
exit 0
