"""The test tree as pytest collects it: with no __init__.py, pytest names a test module by its file name alone, so two
files of one name anywhere under tests/ stop a bare `pytest` at collection ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_modules_under_tests_share_a_file_name() -> None:
    found: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name not in ("conftest.py", "__init__.py"):  # pytest keeps each conftest.py apart by its folder
            found[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in found.items() if len(paths) > 1}
    assert not shared, f"rename one of each (pytest could import only one): {shared}"
