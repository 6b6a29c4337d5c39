#!/usr/bin/env bash
# Quick start, command 2: set everything up, then run the whole test suite.
# The required-environment gate is on: a missing privilege, tool or package stops the run and is
# named, unless it is opted out of with a reason (PODNET_TEST_ALLOW_MISSING, tests/envgate.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PODNET_TEST_REQUIRE=all
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
