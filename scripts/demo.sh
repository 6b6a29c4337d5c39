#!/usr/bin/env bash
# Quick start, command 1: set everything up, then run the demo (two pods, hostPorts, DEL).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/podnetctl demo "$@"
