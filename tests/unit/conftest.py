"""Shared fixtures for the unit tests: the fixture matrix, its expansion, ways to break a copy of it, and the real
matrix for checks that hold whatever it contains.

Rules, expansion, tags, selection and golden renders run on tests/fixtures/matrix.yaml, a small matrix the tests
own: a release added to the real matrix.yaml changes no test but its snapshot (test_snapshot.py). Broken inputs
are made from the fixture, so a test changes one thing and the rest stays realistic. Nothing here needs Docker
or the network.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlimages.core.errors import InputError
from dlimages.model.cells import Cell, Expansion, expand
from dlimages.model.matrixyaml import VersionsAsText
from dlimages.model.spec import Matrix, load_matrix, parse_matrix

REPO = Path(__file__).resolve().parents[2]
# Unit tests never start a Docker engine, nor reach one: a task run through the real command line that would need
# one stops with "not starting one" (set here, so the subprocesses the tests start inherit it too).
os.environ["DLIMAGES_NO_ENGINE_SETUP"] = "1"
os.environ["DOCKER_HOST"] = "unix:///nonexistent/dlimages-unit-tests.sock"
FIXTURE_MATRIX = REPO / "tests/fixtures/matrix.yaml"
MATRIX_TEXT = FIXTURE_MATRIX.read_text(encoding="utf-8")


def matrix_dict() -> dict[str, Any]:
    """The fixture matrix as plain data, versions kept as text (as dlimages itself reads it)."""
    data = yaml.load(MATRIX_TEXT, Loader=VersionsAsText)  # noqa: S506 - a SafeLoader subclass
    assert isinstance(data, dict)
    return data


_PRISTINE = matrix_dict()


def dump(data: dict[str, Any]) -> str:
    # sort_keys=False: the order of frameworks, axes and mirror profiles is meaningful.
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture
def data() -> dict[str, Any]:
    """A fresh, editable copy of the fixture matrix as data (YAML anchors become shared objects)."""
    return copy.deepcopy(_PRISTINE)


@pytest.fixture
def report() -> Callable[[dict[str, Any] | str], str]:
    """Parse edited matrix data (or text) and return the InputError report; fail if it parses."""

    def _report(edited: dict[str, Any] | str) -> str:
        text = edited if isinstance(edited, str) else dump(edited)
        with pytest.raises(InputError) as caught:
            parse_matrix(text)
        return caught.value.report()

    return _report


@pytest.fixture
def parse() -> Callable[[dict[str, Any] | str], Matrix]:
    def _parse(edited: dict[str, Any] | str) -> Matrix:
        return parse_matrix(edited if isinstance(edited, str) else dump(edited))

    return _parse


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    """The fixture matrix."""
    return load_matrix(FIXTURE_MATRIX)


@pytest.fixture(scope="session")
def expansion(matrix: Matrix) -> Expansion:
    return expand(matrix)


@pytest.fixture(scope="session")
def cell(expansion: Expansion) -> Callable[[str, str], Cell]:
    """Look up a fixture cell by framework and slug, e.g. cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")."""
    by_key = {(c.framework, c.slug): c for c in expansion.cells}

    def _cell(framework: str, slug: str) -> Cell:
        assert (framework, slug) in by_key, f"{framework} {slug} is not a valid cell of the fixture matrix"
        return by_key[(framework, slug)]

    return _cell


@pytest.fixture(scope="session")
def real_matrix() -> Matrix:
    """The repo's matrix.yaml: only for checks that hold whatever it contains."""
    return load_matrix(REPO / "matrix.yaml")


@pytest.fixture(scope="session")
def real_expansion(real_matrix: Matrix) -> Expansion:
    return expand(real_matrix)


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A temporary repo root to break without harm: the fixture as matrix.yaml, the real templates/ and tasks.py."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(FIXTURE_MATRIX, root / "matrix.yaml")
    shutil.copy2(REPO / "tasks.py", root / "tasks.py")
    shutil.copytree(REPO / "templates", root / "templates")
    return root
