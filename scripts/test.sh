#!/usr/bin/env bash
# Quick start, command 2: set everything up, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
