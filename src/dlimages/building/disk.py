"""Disk space on the Docker data root, read-only: where it is, what is free (where this user may look), what the
engine holds by its own count (`docker system df`), and the engine's own commands that give space back.

Nothing here reads or deletes the engine's private files: its data root is the engine's, root-only on a normal
install (a member of the `docker` group cannot even stat inside it), and only its own commands may change it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import CLASSIC, CONTAINERD
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell

GB = 10**9
# Measured on the Docker data root (free space sampled every second) for a cold build of the PyTorch CI cell
# (torch 2.1.2, Python 3.11, 5.9 GB image) after `docker builder prune --all`: 8.0 GB at the peak, 5.5 GB kept
# (the image and its cache). Cells on nvidia/cuda bases add their base (about 3 GB runtime, 8 GB devel), once.
COLD_BUILD_PEAK = 8 * GB
NO_SPACE_CHECK = "--no-space-check"  # `invoke build`'s flag that builds a selection the estimate says will not fit
CUDA_BASE_PEAK = {"runtime": 3 * GB, "devel": 8 * GB}
# The containerd image store writes each image twice more (its content store, then the unpacked snapshots): the
# same cold build left 22.4 GB on its data root, 11.1 GB on the classic store's (docs/notes/measurements.md,
# "The containerd store's export, side by side").
CONTAINERD_FACTOR = 2
# The engine's own ways to give space back, cheapest loss first; `invoke disk` prints them, it never runs them.
PRUNE_COMMANDS = (
    ("docker image prune", "untagged images (what rebuilds leave)"),
    ("docker builder prune", "BuildKit's cache not used by a tagged image (the next builds are colder)"),
    ("docker builder prune --all", "all of BuildKit's cache (every next build is cold)"),
    ("docker system df --verbose", "what each image, container and cache record holds"),
)


@dataclass(frozen=True)
class DataRoot:
    """Where the engine keeps images and layers, and how much of its file system is free, where that can be known."""

    path: Path
    driver: str
    endpoint: str  # the engine's address, as the docker CLI resolves it (DOCKER_HOST, DOCKER_CONTEXT, contexts)
    free: int | None  # bytes; None when the engine is elsewhere or its data root is not visible to this user
    why_unknown: str = ""


def gb(size: int) -> str:
    return f"{size / GB:.1f} GB"


def need_from_flag(value: str) -> int:
    """`--need GB`: ASCII digits only (a fullwidth digit or `abc` is refused, exit 2), in bytes."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise InputError([Problem("--need", f"{value!r} is not a size in GB", "a whole number of GB, 0 to 999999")])
    return int(text) * GB


def data_root(runner: Runner) -> DataRoot | None:
    """The engine's data root and the free space on it (None when no engine answers)."""
    done = runner.docker("info", "--format", "{{json .DockerRootDir}} {{json .Driver}}", timeout=30)
    if not done.ok:
        return None
    try:
        path, driver = (json.loads(word) for word in done.out.split())
    except ValueError:
        return None
    endpoint = runner.docker("context", "inspect", "--format", "{{.Endpoints.docker.Host}}", timeout=30).out.strip()
    root = Path(path)
    if not endpoint.startswith("unix://"):
        return DataRoot(root, driver, endpoint, None, f"the engine is not on this machine ({endpoint or 'unknown'})")
    free, why = _free(root)
    return DataRoot(root, driver, endpoint, free, why)


def _free(path: Path) -> tuple[int | None, str]:
    """Free bytes on the file system holding `path` (statvfs asks for no right inside the folder itself)."""
    try:
        stats = os.statvfs(path)
    except OSError as error:
        return None, f"{path} is not visible to this user ({error.strerror})"
    return stats.f_bavail * stats.f_frsize, ""


def describe(root: DataRoot, system_df: str) -> list[str]:
    """The report `invoke disk` prints."""
    free = gb(root.free) if root.free is not None else f"unknown: {root.why_unknown}"
    lines = [f"data root: {root.path} ({root.driver}, engine {root.endpoint})", f"free: {free}", "", system_df.rstrip()]
    lines += ["", "To give space back, the engine's own commands (cheapest loss first):"]
    lines += [f"  {command:<30} {what}" for command, what in PRUNE_COMMANDS]
    return lines


def system_df(runner: Runner) -> str:
    """The engine's own table of what it holds (images, containers, volumes, build cache)."""
    done = runner.docker("system", "df", timeout=120)
    return done.out if done.ok else f"(`docker system df` failed: {done.err.strip() or 'no answer'})"


def peak_need(cells: Sequence[Cell], store: str = CLASSIC) -> int:
    """Bytes a cold build of `cells` may take on the data root at its peak, all kept until the last is built: each
    cell's COLD_BUILD_PEAK, each nvidia/cuda base once (CUDA_BASE_PEAK by flavor), twice that on the containerd
    store. Layers already in the build cache need less: an estimate from above."""
    bases = {cell.base_image: CUDA_BASE_PEAK.get(cell.flavor, 0) for cell in cells if cell.cuda_source == "base"}
    need = len(cells) * COLD_BUILD_PEAK + sum(bases.values())
    return need * (CONTAINERD_FACTOR if store == CONTAINERD else 1)


@dataclass(frozen=True)
class Space:
    """A selection's estimated peak (`peak_need`) against what the data root has free (`root`: None without an
    engine; its `free` None where it cannot be known here)."""

    cells: int
    need: int
    root: DataRoot | None
    store: str = CLASSIC

    @property
    def count(self) -> str:
        return f"{self.cells} cell{'s' if self.cells != 1 else ''}"

    @property
    def short(self) -> bool:
        """Less free than needed: only where the free space is known (unknown is never "too little")."""
        return self.root is not None and self.root.free is not None and self.root.free < self.need

    def estimate(self) -> str:
        """What the selection needs and what is free, in one line."""
        each = f"{gb(COLD_BUILD_PEAK)} a cell, each nvidia/cuda base once more"
        each += ", doubled on the containerd store" if self.store == CONTAINERD else ""
        said = f"{self.count} {'needs' if self.cells == 1 else 'need'} about {gb(self.need)} at the peak of cold "
        said += f"builds ({each}); "
        if self.root is None:
            return said + "no engine answers: the free space is not known"
        if self.root.free is None:
            return said + f"the free space is not known ({self.root.why_unknown})"
        return said + f"{gb(self.root.free)} free on the Docker data root {self.root.path}"

    def shortfall(self) -> str:
        """Why the selection does not fit, with the ways out."""
        free = gb(self.root.free) if self.root is not None and self.root.free is not None else "less"
        where = f" on the Docker data root {self.root.path}" if self.root is not None else ""
        return (
            f"needs about {gb(self.need)} at the peak of cold builds, {free} free{where}: select fewer cells "
            f"(`{usage.MATRIX}` lists them), give space back (`{usage.DISK}` shows how), or build anyway with "
            f"{NO_SPACE_CHECK} (layers already in the build cache need less)"
        )


def shortfall(root: DataRoot, need: int) -> str | None:
    """What to say when less than `need` bytes are free on the data root (None when enough is, or it is unknown)."""
    if root.free is None or root.free >= need:
        return None
    return (
        f"{gb(root.free)} free on the Docker data root {root.path}, {gb(need)} needed: `{usage.DISK}` shows what the "
        "engine holds and the commands that give space back"
    )
