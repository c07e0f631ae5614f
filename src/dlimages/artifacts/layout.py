"""Where the committed files live in the repository: images/, its assets, each cell's folder, the bases lock."""

from __future__ import annotations

from pathlib import Path

from dlimages.model.cells import Cell

IMAGES_DIR = "images"
ASSETS = "assets"  # images/assets/: what every image copies, all of it rendered
BASES_LOCK = f"{IMAGES_DIR}/bases.lock.json"  # written by `invoke bases --lock` (generate/baselock.py)


def cell_dir(root: Path, cell: Cell) -> Path:
    """The cell's folder: its Dockerfile, cell.json and locks."""
    return root / IMAGES_DIR / cell.framework / cell.slug
