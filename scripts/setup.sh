#!/usr/bin/env bash
# Installs what podnet needs on Debian 12 (run as root): the kernel tools, the reference CNI
# plugins and the container runtimes the tests drive, Open vSwitch and OVN (the multi-node part;
# the packages start no daemon without systemd), then a virtualenv with podnet in it.
# Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  iproute2 nftables iptables conntrack util-linux procps
  containernetworking-plugins podman containerd runc busybox-static lxd-client openssl
  curl python3 python3-venv strace libcap2-bin patchelf
  openvswitch-switch ovn-central ovn-host ethtool
)

if [ "$(id -u)" -ne 0 ]; then
  echo "podnet setup: run as root (it creates network namespaces and installs packages)" >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "podnet setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's own interpreter: the plugin is a new process per CNI call, and /usr/bin/python3 starts
# markedly faster than a source-built one (see docs/benchmarks.md).
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
