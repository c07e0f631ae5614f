"""A locked cell of each framework's CUDA build imports and computes from its own lock (issue 19): the lock's three
files installed on the cell's Python with the image's flags in a fresh venv, then the framework imported on the CPU and
asked to multiply two matrices. This is what caught TensorFlow 2.4 with protobuf 5 (its lock passed `pip check`).

Needs PyPI (or the mirror uv is configured with) and each cell's Python (pyenv has 3.8 to 3.13 here); no Docker
and no GPU. Each cell downloads its wheels into a uv cache of its own, deleted with its venv after it: up to 10 GB
at a time, and nothing left in the host's caches (about 30 s a cell here). A missing Python fails the cell's test
(with how to install it); DLIMAGES_NO_LOCK_PROOF=1 skips them instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dlimages.artifacts.pythonlock import lock_state
from dlimages.core.runner import DEFAULT
from dlimages.generate import lockproof
from dlimages.generate.project import Project
from dlimages.model.cells import Cell
from dlimages.model.spec import version_key

REPO = Path(__file__).resolve().parents[2]
PROJECT = Project(REPO)
PIP = PROJECT.matrix.packages.pip
# A devel cell's lock is its runtime's (test_devel_cells_share_their_runtimes_lock). Of each framework's CUDA build,
# the newest release's runtime cell on the newest Python is proved: its wheels are the youngest (87 locks at about 30 s
# each would take CI's whole time; `invoke lock --prove` proves every one, and lock.yml does weekly: docs/workflows.md).
LOCKED = [
    cell
    for cell in PROJECT.expansion.cells
    if lock_state(REPO, cell, PIP).status == "locked" and cell.flavor == "runtime"
]
NEWEST = {
    (c.framework, c.cuda): c
    for c in sorted(LOCKED, key=lambda c: (version_key(c.framework_version), version_key(c.python)))
}
PROVED = sorted(NEWEST.values(), key=lambda c: c.slug)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("DLIMAGES_NO_LOCK_PROOF") == "1", reason="DLIMAGES_NO_LOCK_PROOF=1"),
]


def _body(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]


def test_devel_cells_share_their_runtimes_lock() -> None:
    devel = [c for c in PROJECT.expansion.cells if c.flavor == "devel" and lock_state(REPO, c, PIP).status == "locked"]
    assert devel, "the matrix has locked devel cells"
    for cell in devel:
        runtime = REPO / "images" / cell.framework / cell.slug.replace("-devel", "-runtime") / "requirements.lock"
        assert _body(REPO / "images" / cell.framework / cell.slug / "requirements.lock") == _body(runtime), cell.slug


@pytest.mark.parametrize("cell", PROVED, ids=[cell.slug for cell in PROVED])
def test_the_locked_cell_imports_its_framework_from_its_lock(cell: Cell) -> None:
    with tempfile.TemporaryDirectory(prefix="dlimages-lock-proof-") as folder:  # gone right after, not at exit
        proof = lockproof.prove(REPO, cell, DEFAULT, Path(folder), cache=Path(folder) / "uv-cache")
    assert proof.ok, proof.said
