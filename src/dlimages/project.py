"""The project as the tasks see it: the repo root, its validated matrix and the expanded cells."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dlimages.cells import Expansion, expand
from dlimages.spec import MATRIX_FILE, Matrix, load_matrix


@dataclass
class Project:
    root: Path

    @cached_property
    def matrix(self) -> Matrix:
        return load_matrix(self.root / MATRIX_FILE)

    @cached_property
    def expansion(self) -> Expansion:
        return expand(self.matrix)


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding matrix.yaml (the repo root)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MATRIX_FILE).is_file():
            return folder
    return here
