"""`invoke lock` with the real uv against PyPI: the committed locks are what uv resolves for their cells today, a set
that cannot be resolved fails quickly with uv's explanation, and `--check` catches a pin changed in matrix.yaml.

Needs PyPI (not Docker): it fails without it, so a broken CI host is not mistaken for a green one, unless
DLIMAGES_NO_NETWORK=1 says there is no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlimages.artifacts import layout, pythonlock
from dlimages.core.runner import Runner
from dlimages.generate import lock
from dlimages.generate.project import Project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CI_CELL = "cuda12.1-torch2.1.2-py3.11-runtime"


@pytest.fixture
def network() -> None:
    if os.environ.get("DLIMAGES_NO_NETWORK") == "1":
        pytest.skip("DLIMAGES_NO_NETWORK=1: PyPI is not reachable from this host")


@pytest.fixture
def real_copy(tmp_path: Path) -> Path:
    """The real matrix, templates, tasks.py and images/ (with the committed locks), to change without harm."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("matrix.yaml", "tasks.py"):
        shutil.copy2(REPO / name, root / name)
    for name in ("templates", "images"):
        shutil.copytree(REPO / name, root / name)
    return root


def test_the_committed_lock_is_what_uv_resolves_for_the_cell_today(network: None, real_copy: Path) -> None:
    project = Project(real_copy)
    [cell] = [c for c in project.expansion.cells if c.slug == CI_CELL]
    committed = {name: (layout.cell_dir(REPO, cell) / name).read_text() for name in pythonlock.LOCK_FILES}
    [result] = lock.lock_cells(real_copy, [cell], project.matrix.packages.pip, Runner(), say=lambda _: None)
    assert result.ok, result.problem
    for name, text in committed.items():
        assert (layout.cell_dir(real_copy, cell) / name).read_text() == text, f"{name} differs from a fresh lock"


def test_an_unresolvable_set_fails_fast_and_names_the_conflict(network: None, real_copy: Path) -> None:
    # numpy 1.19.5 has no wheel for Python 3.11: no resolution exists for the Python 3.11 cells.
    matrix = real_copy / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("    numpy: 1.24.4\n", "    numpy: 1.19.5\n", 1))
    project = Project(real_copy)
    [cell] = [c for c in project.expansion.cells if c.slug == CI_CELL]
    start = time.monotonic()
    [result] = lock.lock_cells(real_copy, [cell], project.matrix.packages.pip, Runner(), timeout=120, say=print)
    elapsed = time.monotonic() - start
    assert not result.ok
    assert "uv could not resolve the set" in result.problem
    assert "numpy==1.19.5" in result.problem
    assert elapsed < 120
    # The old lock stays: a failed resolution never half-writes one.
    assert (layout.cell_dir(real_copy, cell) / "requirements.lock").read_text() == (
        layout.cell_dir(REPO, cell) / "requirements.lock"
    ).read_text()


def test_lock_check_fails_after_a_pin_changes_in_matrix_yaml(real_copy: Path) -> None:
    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "invoke", "--search-root", str(real_copy), "lock", "--check"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    passed = check()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "cells locked and up to date" in passed.stdout
    matrix = real_copy / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("    tqdm: 4.66.1\n", "    tqdm: 4.66.2\n", 1))
    failed = check()
    assert failed.returncode == 1
    assert f"images/pytorch/{CI_CELL}: the lock is stale" in failed.stderr + failed.stdout
    assert "run `invoke lock --cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime`" in failed.stderr + failed.stdout
