"""Which cells a range of commits touches (`invoke matrix --since REV`): CI builds only those.

A cell's image is made from its folder under images/ (Dockerfile, cell.json, locks), the assets every image copies
and, when its base is pulled from a registry, the digests images/bases.lock.json records. Git names the paths that
changed; a revision this clone does not have (never fetched, gone after a force push) or none at all means every cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.layout import BASES_LOCK, IMAGES_DIR
from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell

ASSETS = f"{IMAGES_DIR}/assets/"
# A commit or a branch, as git spells them; never an option (git is also given --end-of-options).
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/~^-]{0,199}")
REVISION_ALLOWED = "a commit SHA or a branch, e.g. 1a2b3c4 or origin/main (empty: every cell)"


@dataclass(frozen=True)
class Changed:
    """The cells to build and why (the commit compared with, or why every cell)."""

    cells: tuple[Cell, ...]
    reason: str

    def note(self, total: int) -> str:
        return f"{len(self.cells)} of {total} cells: {self.reason}"


def cell_inputs(cell: Cell) -> tuple[str, ...]:
    """The path prefixes a cell's image is built from."""
    folder = f"{IMAGES_DIR}/{cell.framework}/{cell.slug}/"
    return (folder, ASSETS) if cell.bootstrap_base else (folder, ASSETS, BASES_LOCK)


def touched(cells: Sequence[Cell], paths: Sequence[str]) -> tuple[Cell, ...]:
    """The cells one of whose inputs is among `paths` (repository-relative, as git names them)."""
    return tuple(cell for cell in cells if any(path.startswith(cell_inputs(cell)) for path in paths))


def check_revision(since: str) -> None:
    """InputError naming --since unless it is empty or a revision git can be handed safely."""
    if since and not _REVISION.fullmatch(since):
        raise InputError([Problem("--since", f"{since[:60]!r} is not a revision", REVISION_ALLOWED)])


def changed_since(root: Path, cells: Sequence[Cell], since: str, runner: Runner) -> Changed:
    """The cells whose inputs changed between `since` (through its merge base with HEAD) and HEAD; every cell when
    `since` is empty or git cannot tell."""
    check_revision(since)
    if not since:
        return Changed(tuple(cells), "every cell (no commit to compare with)")
    git = ["git", "-C", str(root)]
    commit = runner([*git, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{since}^{{commit}}"])
    if not commit.ok or not commit.out.strip():
        return Changed(tuple(cells), f"every cell ({since} is not a commit this clone has)")
    sha = commit.out.strip()
    diff = runner([*git, "diff", "--name-only", "--no-renames", "-z", f"{sha}...HEAD", "--"])
    if not diff.ok:
        return Changed(tuple(cells), f"every cell (git cannot compare {sha[:12]} with HEAD: {diff.last_line})")
    paths = [path for path in diff.out.split("\0") if path]
    return Changed(touched(cells, paths), f"inputs changed since {sha[:12]}")
