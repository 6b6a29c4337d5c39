#!/usr/bin/env bash
# Build podnet's node image with podman, offline: the bundle (deploy/bundle.py) from this
# checkout's venv, then an image FROM scratch holding it (deploy/Containerfile).
#   bash deploy/build.sh [TAG]
# Tags localhost/podnet:TAG (default: the bundle's name less "podnet-", e.g. 0.1.0-0d008ca6b83f)
# and localhost/podnet:<package version> (what deploy/podnet.yaml runs). Prints the first. PODMAN may name podman with options (e.g. a test's --root/--runroot);
# PYTHON the interpreter whose environment is bundled (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
read -r -a podman <<<"${PODMAN:-podman}"
ctx=$(mktemp -d "${TMPDIR:-/tmp}/podnet-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
bundle=$("$PYTHON" deploy/bundle.py --rootfs "$ctx/rootfs")
name=$(basename "$bundle")
tag=${1:-${name#podnet-}}
image="localhost/podnet:$tag"
"${podman[@]}" build --pull=never --network=none --layers=false -q \
  -f deploy/Containerfile -t "$image" -t "localhost/podnet:$(cut -d- -f2 <<<"$name")" \
  --label "io.podnet.bundle=$name" "$ctx" >/dev/null
echo "$image"
