"""The project as the tasks see it: the repo root, its validated matrix, the expanded cells, the rendered tree."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dlimages.cells import Expansion, expand
from dlimages.errors import InputError
from dlimages.render import GeneratedFile, render_tree, stale_files, write_tree
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

    def rendered(self) -> list[GeneratedFile]:
        """Everything images/ should hold, in memory (nothing is written when a template fails)."""
        return render_tree(self.root, self.matrix, self.expansion)

    def check_rendered(self) -> int:
        """How many files images/ holds; InputError naming every stale, hand-edited, missing or extra file."""
        files = self.rendered()
        problems = stale_files(self.root, files)
        if problems:
            raise InputError(problems, heading=f"images/ is out of date ({len(problems)} files):")
        return len(files)

    def write_rendered(self) -> tuple[list[str], int]:
        """Bring images/ in line with the sources: what changed ("wrote X", "removed Y") and how many files."""
        files = self.rendered()
        return write_tree(self.root, files), len(files)


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding matrix.yaml (the repo root)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MATRIX_FILE).is_file():
            return folder
    return here
