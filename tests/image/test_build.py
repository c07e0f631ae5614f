"""The builder against the real engine: a failed build tags nothing, a good one gets every tag.

Uses tiny Dockerfiles on the offline base (`dlimages/base:debian12`), not the heavy cells.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest

from dlimages.builder import run_build, summary_table
from dlimages.buildplan import BuildPlan
from dlimages.cells import Cell
from dlimages.mirrors import MirrorArgs
from dlimages.project import Project
from dlimages.runner import DEFAULT as RUNNER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian12"


@pytest.fixture(scope="module")
def cell() -> Cell:
    if os.environ.get("DLIMAGES_NO_DOCKER") == "1":
        pytest.skip("DLIMAGES_NO_DOCKER=1: no Docker engine on this host")
    if not RUNNER.image_exists(BASE):
        pytest.fail(f"{BASE} is missing: run `invoke base` first", pytrace=False)
    real = Project(REPO).expansion.cells[0]
    return dataclasses.replace(real, image=f"lab/test-build-{os.getpid()}", aliases=("v0-alias",))


def plan_for(cell: Cell, tmp_path: Path, body: str) -> BuildPlan:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\n{body}\n", encoding="utf-8")
    argv = ["docker", "buildx", "build", "--progress=plain", "--load", "--file", str(tmp_path / "Dockerfile")]
    argv += ["--iidfile", str(tmp_path / "iid"), str(tmp_path)]
    return BuildPlan(cell, argv, tmp_path / "iid", MirrorArgs("none"))


def test_failed_build_tags_nothing(cell: Cell, tmp_path: Path) -> None:
    result = run_build(
        plan_for(cell, tmp_path, 'RUN echo "No matching distribution found for torch==9.9" && false'),
        REPO,
        io.StringIO(),
    )
    assert not result.ok
    assert result.error is not None and "does not exist on the index" in result.error
    assert result.tags == ()
    assert not any(RUNNER.image_exists(ref) for ref in cell.refs)
    assert "FAILED" in summary_table([result])


def test_good_build_gets_every_tag_after_it_succeeded(cell: Cell, tmp_path: Path) -> None:
    out = io.StringIO()
    result = run_build(plan_for(cell, tmp_path, f"RUN echo built-{os.getpid()} > /built"), REPO, out)
    try:
        assert result.ok, result.error
        assert "DONE" in out.getvalue()  # BuildKit's progress was streamed
        assert result.size and result.size > 0
        for ref in cell.refs:
            assert RUNNER.image_id(ref) == result.image_id
    finally:
        RUNNER.docker("rmi", *cell.refs)
