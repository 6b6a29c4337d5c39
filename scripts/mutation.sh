#!/usr/bin/env bash
# Mutation testing of the pure core (docs/testing.md, "Mutation testing"): mutmut mutates the
# modules listed under [tool.mutmut] in pyproject.toml and runs only the tests listed there (none
# needs root), then prints killed / total per module and every mutant that was not killed.
#
#   scripts/mutation.sh            fresh run (removes mutants/ first), 2 workers
#   scripts/mutation.sh --keep     reuse mutants/ (mutmut re-runs only what changed)
#   MUTMUT_MAX_CHILDREN=1 scripts/mutation.sh
#
# Needs the virtualenv of scripts/setup.sh (mutmut is in the "test" extra). mutants/ is a copy of
# src/ and tests/ with the mutants in it; it is in .gitignore and pytest does not recurse into it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/mutmut ]; then
  echo "mutation: .venv/bin/mutmut is missing: run scripts/setup.sh" >&2
  exit 1
fi
if [ "${1:-}" != "--keep" ]; then
  rm -rf mutants
fi
# mutmut draws a progress line per mutant; keep the log readable when it is not a terminal.
.venv/bin/mutmut run --max-children "${MUTMUT_MAX_CHILDREN:-2}"
echo
.venv/bin/python scripts/mutation_report.py --diffs
