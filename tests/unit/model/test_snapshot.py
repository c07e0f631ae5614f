"""Snapshots, reviewed and refreshed on purpose: the real matrix as `invoke matrix --json` prints it, and the fixture
matrix's cells and exclusions.

These are the only unit tests that change when a release is added, to matrix.yaml (the real snapshot) or to
tests/fixtures/matrix.yaml (the fixture's). After such an edit, refresh them and review the diff:

    DLIMAGES_UPDATE_SNAPSHOT=1 python3 -m pytest tests/unit/model/test_snapshot.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dlimages.model.cells import Expansion
from dlimages.model.tables import exclusions_text

REPO = Path(__file__).resolve().parents[3]
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("DLIMAGES_UPDATE_SNAPSHOT") == "1"


def _compare(name: str, actual: str) -> None:
    snapshot = SNAPSHOTS / name
    if UPDATE:
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text(actual, encoding="utf-8")
    assert snapshot.is_file(), f"no snapshot {name}; create it with DLIMAGES_UPDATE_SNAPSHOT=1"
    assert actual == snapshot.read_text(encoding="utf-8"), (
        f"{name} is out of date: if the change is intended, refresh it with "
        "DLIMAGES_UPDATE_SNAPSHOT=1 python3 -m pytest tests/unit/model/test_snapshot.py and review the diff"
    )


def test_real_matrix_json_matches_its_snapshot() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "matrix", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    _compare("matrix.json", result.stdout)


def test_fixture_cells_match_their_snapshot(expansion: Expansion) -> None:
    _compare("fixture-cells.json", json.dumps([cell.as_json() for cell in expansion.cells], indent=2) + "\n")


def test_fixture_exclusions_match_their_snapshot(expansion: Expansion) -> None:
    _compare("fixture-excluded.txt", exclusions_text(expansion.excluded) + "\n")
