"""`invoke build` refuses what would fill the disk before it starts: no cell flag without --all (every release), and
a selection whose estimated peak is more than the data root has free, unless --no-space-check; --dry-run prints the
estimate and warns instead. No engine: the engine, the data root and the store are faked where a test needs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlimages import commands
from dlimages.building import disk
from dlimages.building.disk import GB, DataRoot
from dlimages.commands import builds
from dlimages.commands.flags import CellFlags
from dlimages.core.errors import InputError
from dlimages.core.imagestore import CLASSIC
from dlimages.generate.project import Project

REPO = Path(__file__).resolve().parents[3]
ONE_CELL = CellFlags(cuda="12.1", torch="2.1", python="3.11")  # the README's offline cell: 8 GB at the peak


@pytest.fixture(scope="module")
def project() -> Project:
    return Project(REPO)


def _free(monkeypatch: pytest.MonkeyPatch, free: int | None) -> None:
    """The engine's data root, with `free` bytes free (None: no engine answers)."""
    found = None if free is None else DataRoot(Path("/var/lib/docker"), "overlay2", "unix:///run/docker.sock", free)
    monkeypatch.setattr(disk, "data_root", lambda runner: found)
    monkeypatch.setattr(builds, "image_store", lambda runner: CLASSIC)


def test_no_cell_flag_is_refused_naming_how_many_cells_and_how_to_select(project: Project) -> None:
    every = builds.select_cells(project, CellFlags())
    with pytest.raises(InputError) as raised:
        commands.build(project, dry_run=True)
    said = raised.value.report()
    assert said.startswith(f"error: cell flags: none given: `invoke build` alone would build {len(every)} cells, ")
    assert f"about {disk.gb(disk.peak_need(every))} at the peak of cold builds" in said
    assert f"or --all for those {len(every)}" in said and "`invoke matrix` lists the cells" in said


def test_all_with_cell_flags_is_refused(project: Project) -> None:
    with pytest.raises(InputError) as raised:
        commands.build(project, cells=CellFlags(torch="2.1"), all_=True, dry_run=True)
    assert raised.value.report() == "error: --all: given with --torch (allowed: --all alone, or cell flags without it)"


def test_all_builds_every_release_and_the_dry_run_says_what_it_needs(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    _free(monkeypatch, 37 * GB)
    every = builds.select_cells(project, CellFlags())
    out = commands.build(project, all_=True, dry_run=True)
    assert out is not None and out.count("docker buildx build ") == len(every)
    first, warning = out.splitlines()[:2]
    need = disk.gb(disk.peak_need(every))
    assert first.startswith(f"# disk: {len(every)} cells need about {need} at the peak of cold builds")
    assert first.endswith("37.0 GB free on the Docker data root /var/lib/docker")
    assert warning.startswith(f"# warning: needs about {need} at the peak of cold builds, 37.0 GB free")
    assert warning.endswith("without --dry-run this build is refused")


def test_a_dry_run_that_fits_warns_of_nothing(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    _free(monkeypatch, None)
    out = commands.build(project, cells=ONE_CELL, dry_run=True)
    assert out is not None and out.startswith("# disk: 1 cell needs about 8.0 GB at the peak of cold builds")
    assert "no engine answers" in out.splitlines()[0] and "# warning" not in out


def test_a_build_larger_than_the_free_space_is_refused_before_anything_is_made(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    _free(monkeypatch, 5 * GB)
    monkeypatch.setattr(builds, "engine", lambda root, no_setup: None)

    def made(*_: object) -> None:
        raise AssertionError("a base was made for a refused build")

    monkeypatch.setattr(builds, "make_local_bases", made)
    with pytest.raises(InputError) as raised:
        commands.build(project, cells=ONE_CELL)
    said = raised.value.report()
    assert said.startswith("error: --cuda 12.1 --torch 2.1 --python 3.11 (1 cell): needs about 8.0 GB at the peak")
    assert "5.0 GB free on the Docker data root /var/lib/docker" in said and "--no-space-check" in said


def test_no_space_check_builds_anyway_and_says_so(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _free(monkeypatch, 5 * GB)
    monkeypatch.setattr(builds, "engine", lambda root, no_setup: None)

    class Past(Exception):
        """Raised by the first step after the guard: the build went on."""

    def made(*_: object) -> None:
        raise Past

    monkeypatch.setattr(builds, "plan_cells", lambda *a, **k: [])  # no registry asked for a digest
    monkeypatch.setattr(builds, "make_local_bases", made)
    with pytest.raises(Past):
        commands.build(project, cells=ONE_CELL, no_space_check=True)
    out = capsys.readouterr().out
    assert "disk: 1 cell needs about 8.0 GB" in out and "warning: needs about 8.0 GB" in out


def test_the_task_exits_2_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "build"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: cell flags: none given" in done.stderr and "--all" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "docker buildx" not in done.stdout
