#!/usr/bin/env bash
# Build podnet's node image with podman, offline: the bundle (deploy/bundle.py) from this
# checkout's venv, then an image FROM scratch holding it (deploy/Containerfile).
#   bash deploy/build.sh [TAG]        (default tag: the bundle's name)
# Prints the image name. PODMAN may name podman with options (e.g. a test's --root/--runroot);
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
  -f deploy/Containerfile -t "$image" \
  --label "io.podnet.bundle=$name" "$ctx" >/dev/null
echo "$image"
