"""Advice on real failed builds: the PyTorch CI cell of matrix.yaml, built through plan_build + run_build on the real
engine, (a) from a base registry nothing listens on and (b) with a pip index nothing listens on. Each result must
name what failed, the host from the actual error and the ways out; the summary table must fit 100 columns with the
error under it; and a failed build tags nothing.

Cheap: (a) fails at FROM in under a second; (b) fails at the first pip step after pip's retries (about 12 s when the
mirror and apt steps are in the build cache, which the first run of this test puts there).
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest
from support import require_engine

from dlimages.artifacts.pythonlock import installs_with_uv, lock_state
from dlimages.building import aptdebs
from dlimages.building.advice import MIRROR_BASES, Remedies
from dlimages.building.builder import TABLE_WIDTH, BuildResult, run_build, summary_table
from dlimages.building.mirrors import MirrorArgs
from dlimages.building.plan import Secrets, apt_debs, plan_build
from dlimages.commands.builds import stage_uv
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate.project import Project
from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian12"
SLUG = "cuda12.1-torch2.1.2-py3.11-runtime"
NOTHING_LISTENS_REGISTRY = "127.0.0.1:1"  # on the engine's host: connection refused
NOTHING_LISTENS_INDEX = "http://127.0.0.1:9/simple/"  # inside the build container: connection refused


@pytest.fixture(scope="module")
def project() -> Project:
    require_engine()
    if not RUNNER.image_exists(BASE):
        pytest.skip(f"{BASE} is missing (the PyTorch CI cell builds on it): run `invoke base` first")
    return Project(REPO)


@pytest.fixture(scope="module")
def cell(project: Project) -> Cell:
    [real] = [c for c in project.expansion.cells if c.slug == SLUG and c.framework == "pytorch"]
    # A name of its own: a build that wrongly tagged would show here, and no real image is touched.
    return dataclasses.replace(real, image=f"dlimages-test/advice-{os.getpid()}", aliases=("v0-advice",))


@pytest.fixture(scope="module")
def remedies(project: Project) -> Remedies:
    return Remedies.from_matrix(project.matrix, project.expansion.cells)


def build(
    cell: Cell, mirror: MirrorArgs, workdir: Path, remedies: Remedies, base_image: str | None = None
) -> BuildResult:
    apt = apt_debs(REPO, cell, mirror, None)  # the cell's locked OS packages, as `invoke build` hands them in
    if apt is not None:
        aptdebs.flat_repo(apt.lock, apt.origin, REPO, RUNNER)
    uv = installs_with_uv(cell, lock_state(REPO, cell, Project(REPO).matrix.packages.pip).locked)
    if uv:  # the locked steps' uv, as `invoke build` stages it and hands it in
        stage_uv(REPO)
    metadata = workdir / f"{cell.slug}.json"
    plan = plan_build(cell, mirror, Secrets(), base_image=base_image, metadata_file=metadata, apt=apt, uv=uv)
    out = io.StringIO()
    result = run_build(plan, REPO, out, remedies=remedies)
    assert not result.ok, out.getvalue()[-3000:]
    assert not plan.metadata_file.exists()
    assert not any(RUNNER.image_exists(ref) for ref in cell.refs), "a failed build tagged an image"
    return result


@pytest.fixture(scope="module")
def base_failure(cell: Cell, remedies: Remedies, tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    pulled = f"{NOTHING_LISTENS_REGISTRY}/mirror/{BASE}"
    return build(cell, MirrorArgs("none"), tmp_path_factory.mktemp("base"), remedies, base_image=pulled)


@pytest.fixture(scope="module")
def pip_failure(cell: Cell, remedies: Remedies, tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    mirror = MirrorArgs("none", pip_index=NOTHING_LISTENS_INDEX)
    return build(cell, mirror, tmp_path_factory.mktemp("pip"), remedies)


def profiles_with(matrix: Matrix, what: str) -> str:
    return "|".join(name for name, profile in matrix.mirrors.items() if getattr(profile, what))


def test_a_base_from_an_unreachable_registry_names_it_and_three_ways_out(
    base_failure: BuildResult, project: Project
) -> None:
    found = base_failure.diagnosis
    assert found is not None and found.kind == "base"
    assert (found.host, found.image) == (NOTHING_LISTENS_REGISTRY, f"{NOTHING_LISTENS_REGISTRY}/mirror/{BASE}")
    assert base_failure.summary == f"base image not pullable ({NOTHING_LISTENS_REGISTRY})"
    advice = base_failure.error
    assert advice is not None
    assert advice.startswith(f"The base image {BASE} cannot be pulled from the registry at {NOTHING_LISTENS_REGISTRY}")
    assert "connection refused" in advice
    # The three ways out: the registry of one's own (filled once), a profile's registry mirror, the offline base.
    assert f"`{MIRROR_BASES} --to {NOTHING_LISTENS_REGISTRY}/mirror`" in advice
    assert f"--mirror {profiles_with(project.matrix, 'bases')}" in advice
    assert "run `invoke base`, then `invoke build --cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime`" in advice


def test_an_unreachable_pip_index_names_its_host_and_the_pypi_profiles(
    pip_failure: BuildResult, project: Project
) -> None:
    found = pip_failure.diagnosis
    assert found is not None and (found.kind, found.host) == ("pypi", "127.0.0.1:9")
    assert pip_failure.summary == "PyPI unreachable (127.0.0.1:9)"
    assert pip_failure.error is not None
    assert f"pip could not reach the package index at 127.0.0.1:9 ({NOTHING_LISTENS_INDEX})" in pip_failure.error
    assert f"--mirror {profiles_with(project.matrix, 'pypi')}" in pip_failure.error
    assert "pinned" not in pip_failure.error  # pip's own last words ("No matching distribution") mislead


def test_the_summary_of_real_failures_fits_100_columns_with_the_errors_under_it(
    base_failure: BuildResult, pip_failure: BuildResult, cell: Cell
) -> None:
    text = summary_table([base_failure, pip_failure], [cell])
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > TABLE_WIDTH]
    assert not too_wide, "\n".join(too_wide)
    table = lines[: lines.index("")]
    assert [row.split()[:3] for row in table[2:]] == [[cell.slug, "FAILED", "(1)"], [cell.slug, "FAILED", "(2)"]]
    under = lines[len(table) :]
    assert f"(1) {cell.slug}: {base_failure.summary}" in under
    assert f"(2) {cell.slug}: {pip_failure.summary}" in under
    assert sum(line.startswith("    error: ") for line in under) == 2  # the line of output that shows each failure
    assert "connect: connection refused" in " ".join(under)  # the engine's own words, wrapped under the table
