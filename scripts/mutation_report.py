"""Summarise the last mutmut run (mutants/*.meta): killed / total per module and overall, then
every mutant that was not killed with its diff (docs/testing.md, "Mutation testing").

Run from the project root after ``mutmut run`` (scripts/mutation.sh does both):
``.venv/bin/python scripts/mutation_report.py [--diffs]``.
"""

from __future__ import annotations

import sys
from collections import Counter

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files


def main() -> int:
    diffs = "--diffs" in sys.argv[1:]
    total: Counter[str] = Counter()
    rows = []
    left: list[tuple[str, str, str]] = []
    for path in sorted(walk_mutatable_files()):
        data = SourceFileMutationData(path=path)
        data.load()
        counts: Counter[str] = Counter()
        for key, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            counts[status] += 1
            if status != "killed":
                left.append((key, status, str(path)))
        total.update(counts)
        rows.append((str(path), counts))
    if not rows:
        print("no mutmut results in mutants/: run scripts/mutation.sh first", file=sys.stderr)
        return 1

    def line(name: str, c: Counter[str]) -> str:
        n = sum(c.values())
        others = ", ".join(f"{s} {k}" for s, k in sorted(c.items()) if s != "killed")
        return f"| {name} | {c['killed']} / {n} | {100 * c['killed'] / n:.1f} % | {others or '-'} |"

    print("| module | killed / total | score | not killed |")
    print("|---|---|---|---|")
    for name, counts in rows:
        print(line(name.removeprefix("src/"), counts))
    print(line("**all**", total))
    print()
    for key, status, path in left:
        print(f"{key}: {status}")
        if diffs:
            diff = get_diff_for_mutant(key, path=path)
            for d in diff.splitlines():
                if d[:1] in "+-" and not d.startswith(("---", "+++")):
                    print("    " + d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
