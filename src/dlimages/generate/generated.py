"""A generated file, and how generated files replace what is on disk (images/ through render, the docs through
docsblocks): each one whole, all or none of them, and each checked against a fresh render."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.layout import IMAGES_DIR
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import REGULAR, stage

STAGED = ".render.tmp"  # a file render wrote beside its target, not yet renamed over it; only render makes these
EXECUTABLE = 0o755


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to the repo root
    content: bytes
    mode: int = REGULAR
    part: str = ""  # what of the file is generated, for messages ("the block between ..."); empty: all of it


def remove_staged(root: Path, files: list[GeneratedFile]) -> None:
    """Remove what a render stopped part-way staged and never renamed. Only render stages files with this suffix,
    and renders take turns, so none of them is in use; one that cannot be removed harms nothing (a check names
    it)."""
    pattern = f".*{STAGED}"
    images = root / IMAGES_DIR
    leftovers = set(images.rglob(pattern)) if images.is_dir() else set()
    for folder in {(root / f.path).parent for f in files}:
        if folder.is_dir():
            leftovers.update(folder.glob(pattern))
    for path in leftovers:
        with contextlib.suppress(OSError):
            path.unlink()


def replace(root: Path, files: list[GeneratedFile], *, where: str = "") -> list[str]:
    """Write each file that differs from what is there ("wrote X"), whole: every one is staged (written beside its
    target and synced) first, and only then is each renamed over its target. A failure puts back what was replaced
    and raises InputError naming `where` (or the file) and the file being written."""
    differing: list[GeneratedFile] = []
    staged: list[tuple[Path, Path]] = []  # (the new file, its target)
    made: list[Path] = []  # folders made for new files, removed again after a failure
    replaced: list[tuple[Path, tuple[bytes, int] | None]] = []  # (target, its old content and mode, or None)
    current = root
    try:
        differing = [generated for generated in files if not _same(root / generated.path, generated)]
        for generated in differing:
            current = root / generated.path
            made += _make_folders(current.parent)
            staged.append((stage(current, generated.content, generated.mode, suffix=STAGED), current))
        for new, current in staged:
            old = (current.read_bytes(), file_mode(current)) if current.is_file() else None
            os.replace(new, current)
            replaced.append((current, old))
    except OSError as error:
        restored = _undo(staged, replaced, made)
        outcome = (
            "not written, left as it was" if restored else "partly written (the old content could not be put back)"
        )
        message, path = f"{outcome}: {error.strerror or error}", shown(root, current)
        raise InputError([Problem(where, f"{message} ({path})") if where else Problem(path, message)]) from None
    return [f"wrote {generated.path}" for generated in differing]


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and those above it that are missing; returns those made, outermost first."""
    missing: list[Path] = []
    while not folder.exists() and not folder.is_symlink():
        missing.insert(0, folder)
        folder = folder.parent
    for path in missing:
        path.mkdir()
    return missing


def _same(target: Path, generated: GeneratedFile) -> bool:
    return target.is_file() and target.read_bytes() == generated.content and file_mode(target) == generated.mode


def _undo(
    staged: list[tuple[Path, Path]], replaced: list[tuple[Path, tuple[bytes, int] | None]], made: list[Path]
) -> bool:
    """Put back what `replace` replaced and remove what it staged and the folders it made; False where the old
    content could not be put back (the next render writes it)."""
    restored = True
    for target, old in reversed(replaced):
        try:
            if old is None:
                target.unlink()
            else:
                os.replace(stage(target, old[0], old[1], suffix=STAGED), target)
        except OSError:
            restored = False
    for new, _ in staged:
        with contextlib.suppress(OSError):  # a leftover the next render removes
            new.unlink(missing_ok=True)
    for folder in reversed(made):
        with contextlib.suppress(OSError):  # not empty: something else is in it now
            folder.rmdir()
    return restored


def stale(root: Path, generated: GeneratedFile, differs: str) -> Problem | None:
    """A Problem where the file is missing, or its content is not the generated one (`differs` says so); else None."""
    if not (root / generated.path).is_file():
        return Problem(generated.path, "missing; run `invoke render`")
    if (root / generated.path).read_bytes() != generated.content:
        return Problem(generated.path, f"{differs}; run `invoke render`")
    return None


def file_mode(path: Path) -> int:
    return EXECUTABLE if os.access(path, os.X_OK) else REGULAR


def shown(root: Path, filename: object) -> str:
    """A path for a message: relative to the repo root where it is inside it."""
    path = Path(str(filename))
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
