"""The space a selection's cold builds may take at their peak (disk.peak_need) against the data root's free space
(disk.Space): numbers in, the verdict and what it says out; and CI's own builds, which must never be refused."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dlimages.building import disk
from dlimages.building.disk import GB, DataRoot, Space
from dlimages.commands.ci_plan import BUILDS
from dlimages.core.imagestore import CLASSIC, CONTAINERD
from dlimages.model.cells import Expansion
from dlimages.model.selection import Selection, select
from dlimages.model.spec import Matrix

DATA_ROOT = Path("/var/lib/docker")
CELL_FLAGS = ("cuda", "torch", "tf", "python", "flavor")


def root(free: int | None, why: str = "") -> DataRoot:
    return DataRoot(DATA_ROOT, "overlay2", "unix:///run/docker.sock", free, why)


def test_each_cell_needs_a_cold_builds_peak_and_each_cuda_base_once(expansion: Expansion) -> None:
    by_slug = {cell.slug: cell for cell in expansion.cells}
    wheel = [by_slug["cuda12.1-torch2.1.2-py3.11-runtime"], by_slug["cuda11.8-tf2.14.1-py3.11-runtime"]]
    assert disk.peak_need(wheel) == 2 * disk.COLD_BUILD_PEAK == 16 * GB
    runtime = by_slug["cuda11.8-tf2.13.1-py3.8-runtime"]  # nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu20.04
    devel = by_slug["cuda11.8-tf2.13.1-py3.8-devel"]
    assert disk.peak_need([runtime]) == (8 + 3) * GB
    assert disk.peak_need([devel]) == (8 + 8) * GB
    same_base = [runtime, by_slug["cuda11.8-tf2.13.1-py3.10-runtime"]]  # ubuntu22.04: another base
    assert disk.peak_need(same_base) == (2 * 8 + 2 * 3) * GB
    assert disk.peak_need([runtime, runtime]) == (2 * 8 + 3) * GB  # one base, pulled once
    assert disk.peak_need(wheel, CONTAINERD) == 2 * disk.peak_need(wheel, CLASSIC)


def test_a_selection_larger_than_the_free_space_is_short_and_says_both_numbers() -> None:
    space = Space(17, 136 * GB, root(37 * GB))
    assert space.short
    said = space.shortfall()
    assert "needs about 136.0 GB at the peak of cold builds, 37.0 GB free on the Docker data root" in said
    assert disk.NO_SPACE_CHECK in said and "`invoke disk`" in said and "`invoke matrix`" in said
    estimate = space.estimate()
    assert estimate.startswith("17 cells need about 136.0 GB at the peak of cold builds (8.0 GB a cell")
    assert estimate.endswith("37.0 GB free on the Docker data root /var/lib/docker")


def test_a_selection_that_fits_is_not_short() -> None:
    assert not Space(1, 8 * GB, root(8 * GB)).short
    assert Space(1, 8 * GB, root(8 * GB - 1)).short


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (None, "no engine answers: the free space is not known"),
        (root(None, "/var/lib/docker is not visible to this user (Permission denied)"), "not visible to this user"),
    ],
)
def test_unknown_free_space_is_never_too_little(found: DataRoot | None, said: str) -> None:
    space = Space(35, 286 * GB, found)
    assert not space.short and said in space.estimate()


def test_the_containerd_store_says_it_doubles_the_estimate() -> None:
    assert "doubled on the containerd store" in Space(1, 16 * GB, root(50 * GB), CONTAINERD).estimate()
    assert "containerd" not in Space(1, 8 * GB, root(50 * GB)).estimate()


@pytest.mark.parametrize("store", [CLASSIC, CONTAINERD])
@pytest.mark.parametrize("flags", BUILDS)
def test_ci_builds_fit_on_a_ci_host(real_matrix: Matrix, real_expansion: Expansion, flags: str, store: str) -> None:
    # `invoke ci` gives back space below 40 GB free (README: the run needs 50 GB): each of its builds selects one cell.
    words = shlex.split(flags)
    given = {name: words[words.index(f"--{name}") + 1] if f"--{name}" in words else None for name in CELL_FLAGS}
    cells = select(real_matrix, real_expansion, Selection.from_flags(**given))
    assert len(cells) == 1
    assert not Space(1, disk.peak_need(cells, store), root(40 * GB), store).short


def test_any_one_cell_fits_on_a_hosted_runner(real_expansion: Expansion) -> None:
    # .github/workflows/images.yml builds one cell a job, after making room (about 50 GB free on the runner's /).
    worst = max(disk.peak_need([cell], CONTAINERD) for cell in real_expansion.cells)
    assert worst <= 32 * GB
