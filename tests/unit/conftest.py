"""Shared fixtures for the unit tests: the real matrix, its expansion, and ways to break a copy of it.

Nothing here needs Docker or the network. Broken inputs are made from the repo's own matrix.yaml, so a
test changes one thing and the rest stays realistic.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlimages.cells import Cell, Expansion, expand
from dlimages.errors import InputError
from dlimages.spec import Matrix, _VersionsAsText, load_matrix, parse_matrix

REPO = Path(__file__).resolve().parents[2]
MATRIX_TEXT = (REPO / "matrix.yaml").read_text(encoding="utf-8")


def matrix_dict() -> dict[str, Any]:
    """The real matrix.yaml as plain data, versions kept as text (as dlimages itself reads it)."""
    data = yaml.load(MATRIX_TEXT, Loader=_VersionsAsText)  # noqa: S506 - a SafeLoader subclass
    assert isinstance(data, dict)
    return data


_PRISTINE = matrix_dict()


def dump(data: dict[str, Any]) -> str:
    # sort_keys=False: the order of frameworks, axes and mirror profiles is meaningful.
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture
def data() -> dict[str, Any]:
    """A fresh, editable copy of the real matrix as data (YAML anchors become shared objects)."""
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
    return load_matrix(REPO / "matrix.yaml")


@pytest.fixture(scope="session")
def expansion(matrix: Matrix) -> Expansion:
    return expand(matrix)


@pytest.fixture(scope="session")
def cell(expansion: Expansion) -> Callable[[str, str], Cell]:
    """Look up a valid cell by framework and slug, e.g. cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")."""
    by_key = {(c.framework, c.slug): c for c in expansion.cells}

    def _cell(framework: str, slug: str) -> Cell:
        assert (framework, slug) in by_key, f"{framework} {slug} is not a valid cell of the real matrix"
        return by_key[(framework, slug)]

    return _cell


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """matrix.yaml, templates/ and tasks.py copied into a temporary repo root, to break without harm."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(REPO / "matrix.yaml", root / "matrix.yaml")
    shutil.copy2(REPO / "tasks.py", root / "tasks.py")
    shutil.copytree(REPO / "templates", root / "templates")
    return root
