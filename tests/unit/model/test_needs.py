"""What a cell's build needs from outside (Cell.needs), read off the model; and the cell the advice proposes when one
of those sources failed (selection.nearest_without): the user's release kept where a cell of it builds without the
source, else the nearest release, then the nearest CUDA, then Python."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlimages.model.cells import BASE, HUB, PYPI, Cell, Expansion, need_words
from dlimages.model.selection import nearest_without

CellLookup = Callable[[str, str], Cell]
REPO = Path(__file__).resolve().parents[3]
TORCH_INDEX = "pytorch-index"


@pytest.mark.parametrize(
    ("framework", "slug", "needs"),
    [
        ("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime", (HUB, TORCH_INDEX, PYPI)),  # ubuntu, PyTorch's cu118 index
        ("pytorch", "cuda11.8-torch2.1.2-py3.11-runtime", (BASE, TORCH_INDEX, PYPI)),  # the offline base, same index
        ("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime", (BASE, PYPI)),  # PyPI's default wheel is the cu121 build
        ("pytorch", "cuda12.1-torch2.1.2-py3.8-runtime", (HUB, PYPI)),
        ("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime", (HUB, TORCH_INDEX, PYPI)),  # a find-links page
        ("tensorflow", "cuda11.8-tf2.13.1-py3.10-devel", (HUB, PYPI)),  # nvidia/cuda, on Docker Hub
        ("tensorflow", "cuda11.8-tf2.14.1-py3.11-runtime", (BASE, PYPI)),  # [and-cuda] wheels on Debian 12
    ],
)
def test_needs_name_the_base_then_the_indexes(cell: CellLookup, framework: str, slug: str, needs: tuple[str]) -> None:
    assert cell(framework, slug).needs == needs


def test_a_base_on_another_registry_is_needed_by_its_host(cell: CellLookup) -> None:
    found = cell("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime")
    assert dataclasses.replace(found, base_image="nvcr.io/nvidia/cuda:11.8.0").needs == ("nvcr.io", PYPI)
    assert dataclasses.replace(found, base_image="docker.io/library/ubuntu:22.04").needs == (HUB, PYPI)
    assert dataclasses.replace(found, base_image="localhost:5000/ubuntu:22.04").needs == ("localhost:5000", PYPI)


def test_needs_are_said_in_words() -> None:
    assert need_words(HUB) == "Docker Hub" and need_words(PYPI) == "PyPI"
    assert need_words(TORCH_INDEX) == "PyTorch's index"
    assert need_words("nvcr.io") == "the registry nvcr.io"
    assert "invoke base" in need_words(BASE)


def test_a_lock_names_an_index_exactly_where_the_cell_needs_it(real_expansion: Expansion) -> None:
    # The lock's header says where it was resolved from ("| PyPI" or "| PyPI and URL"): the same source as the model.
    for cell in real_expansion.cells:
        lock = REPO / "images" / cell.framework / cell.slug / "framework.lock"
        if not lock.is_file():
            assert TORCH_INDEX in cell.needs, f"{cell.slug}: unlocked, though PyPI has everything it needs"
            continue
        header = re.search(r"^# Cell: .*\| (PyPI.*)$", lock.read_text(encoding="utf-8"), re.MULTILINE)
        assert header is not None, lock
        assert (header.group(1) != "PyPI") == (TORCH_INDEX in cell.needs), cell.slug


def test_the_release_is_kept_where_a_cell_of_it_builds_without_the_failed_source(expansion: Expansion) -> None:
    cells = expansion.cells
    like = next(c for c in cells if c.slug == "cuda12.1-torch2.1.2-py3.10-runtime")
    found = nearest_without(cells, HUB, like)
    assert found is not None and found.slug == "cuda12.1-torch2.1.2-py3.11-runtime"  # not the newest release
    like = next(c for c in cells if c.slug == "cuda11.8-torch2.1.2-py3.10-runtime")
    found = nearest_without(cells, HUB, like)
    assert found is not None and found.slug == "cuda11.8-torch2.1.2-py3.11-runtime"  # the nearest CUDA first
    found = nearest_without(cells, TORCH_INDEX, like)
    assert found is not None and found.slug == "cuda12.1-torch2.1.2-py3.10-runtime"  # then the nearest Python


def test_without_a_cell_of_the_release_the_nearest_release_is_taken(expansion: Expansion) -> None:
    cells = expansion.cells
    like = next(c for c in cells if c.slug == "cuda11.0-torch1.7.1-py3.8-runtime")
    found = nearest_without(cells, HUB, like)
    assert found is not None and found.slug == "cuda11.8-torch2.0.1-py3.11-runtime"  # 2.0.1, not 2.1.2
    pypi_only = nearest_without(cells, HUB, like, only=lambda c: set(c.needs) <= {BASE, PYPI})
    assert pypi_only is not None and pypi_only.slug == "cuda12.1-torch2.1.2-py3.11-runtime"
    tf = next(c for c in cells if c.slug == "cuda11.0-tf2.4.4-py3.8-devel")
    found = nearest_without(cells, HUB, tf)
    assert found is not None and found.slug == "cuda11.8-tf2.14.1-py3.11-runtime"  # the only TF cell without a hub


def test_nothing_is_proposed_when_every_cell_needs_the_failed_source(expansion: Expansion) -> None:
    cells = [c for c in expansion.cells if PYPI in c.needs]
    assert nearest_without(cells, PYPI, cells[0]) is None
    assert nearest_without([], HUB) is None


def test_without_a_cell_the_newest_of_the_first_framework_is_proposed(expansion: Expansion) -> None:
    found = nearest_without(expansion.cells, HUB)
    assert found is not None and found.slug == "cuda12.1-torch2.1.2-py3.11-runtime"
    found = nearest_without(expansion.cells, HUB, only=lambda c: c.framework == "tensorflow")
    assert found is not None and found.framework == "tensorflow"
