"""The project as the tasks see it: the repo root, its validated matrix, the expanded cells, the rendered tree and
the docs made from the matrix."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dlimages.core.errors import InputError
from dlimages.generate.docsblocks import Block, render_documents, stale_documents, write_documents
from dlimages.generate.generated import GeneratedFile
from dlimages.generate.render import render_tree, rendering, stale_files, write_tree
from dlimages.model.cells import Expansion, expand
from dlimages.model.spec import MATRIX_FILE, Matrix, load_matrix


@dataclass
class Project:
    root: Path
    blocks: tuple[Block, ...] = ()  # generated blocks from above this wing (the flags: commands.flags_block)

    @cached_property
    def matrix(self) -> Matrix:
        return load_matrix(self.root / MATRIX_FILE)

    @cached_property
    def expansion(self) -> Expansion:
        return expand(self.matrix)

    def rendered(self) -> list[GeneratedFile]:
        """Everything images/ should hold, in memory (nothing is written when a template fails)."""
        return render_tree(self.root, self.matrix, self.expansion)

    def documents(self) -> list[GeneratedFile]:
        """The documents with their generated blocks, in memory (none in a tree without docs/)."""
        return render_documents(self.root, self.matrix, self.expansion, self.blocks)

    def check_rendered(self) -> int:
        """How many files images/ and the docs hold; InputError naming every stale, hand-edited, missing or extra
        file, and every document whose generated block differs. Waits for a render in progress."""
        with rendering(self.root, writing=False):
            files, documents = self.rendered(), self.documents()
            stale, stale_docs = stale_files(self.root, files), stale_documents(self.root, documents)
        if stale or stale_docs:
            what = "images/ is" if not stale_docs else "the docs are" if not stale else "images/ and the docs are"
            count = len(stale) + len(stale_docs)
            raise InputError([*stale, *stale_docs], heading=f"{what} out of date ({count} files):")
        return len(files) + len(documents)

    def write_rendered(self) -> tuple[list[str], int]:
        """Bring images/ and the docs in line with the sources: what changed ("wrote X", "removed Y") and how many
        files. Everything is rendered before anything is written, and renders of this repository take turns: this
        one waits for another in progress, then renders from what that one left (its locks included)."""
        with rendering(self.root):
            files, documents = self.rendered(), self.documents()
            changed = write_tree(self.root, files)
            return changed + write_documents(self.root, documents), len(files) + len(documents)


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding matrix.yaml (the repo root)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MATRIX_FILE).is_file():
            return folder
    return here
