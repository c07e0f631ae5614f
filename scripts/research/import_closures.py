#!/usr/bin/env python3
"""How much of the package one module pulls in, and the longest chain of imports: the numbers issue 35's hand-over
wing is measured by (docs/architecture.md). Reads the import graph with grimp (import-linter's own), from the
source, importing nothing.

Prints JSON: for each module named, the dlimages modules it imports directly or through others and their lines;
the longest import chain between dlimages modules; the package's modules, lines and modules over 400 lines.

    PYTHONPATH=src python3 scripts/research/import_closures.py dlimages.building.plan dlimages.artifacts.ledger
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import grimp

PACKAGE = "dlimages"
SRC = Path(__file__).resolve().parents[2] / "src"
LONG = 400


def lines(module: str) -> int:
    path = SRC.joinpath(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return len(file.read_text(encoding="utf-8").splitlines()) if file.is_file() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules whose closure to print, e.g. dlimages.building.plan")
    args = parser.parse_args()
    graph = grimp.build_graph(PACKAGE)
    ours = sorted(m for m in graph.modules if m == PACKAGE or m.startswith(f"{PACKAGE}."))

    def imported(module: str) -> list[str]:
        return sorted(m for m in graph.find_modules_directly_imported_by(module) if m in ours and m != module)

    def closure(module: str) -> set[str]:
        seen: set[str] = set()
        stack = [module]
        while stack:
            for found in imported(stack.pop()):
                if found not in seen:
                    seen.add(found)
                    stack.append(found)
        return seen

    sys.setrecursionlimit(10_000)

    @functools.cache
    def longest(module: str) -> tuple[str, ...]:  # the package's imports are acyclic (import-linter's contract)
        return (module, *max((longest(m) for m in imported(module)), key=len, default=()))

    unknown = [m for m in args.modules if m not in ours]
    if unknown:
        parser.exit(2, f"error: not modules of {PACKAGE}: {', '.join(unknown)}\n")
    chain = max((longest(m) for m in ours), key=len)
    report = {
        "closures": {m: {"modules": len(closure(m)), "lines": sum(lines(c) for c in closure(m))} for m in args.modules},
        "longest_chain": {"files": len(chain), "modules": list(chain)},
        "package": {
            "modules": len(ours),
            "lines": sum(lines(m) for m in ours),
            f"over_{LONG}_lines": {m: lines(m) for m in ours if lines(m) > LONG},
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
