"""Disk space on the Docker data root, read-only: where it is, what is free (where this user may look), what the
engine holds by its own count (`docker system df`), and the engine's own commands that give space back.

Nothing here reads or deletes the engine's private files: its data root is the engine's, root-only on a normal
install (a member of the `docker` group cannot even stat inside it), and only its own commands may change it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import Runner

GB = 10**9
# Measured on the Docker data root (free space sampled every second) for a cold build of the PyTorch CI cell
# (torch 2.1.2, Python 3.11, 5.9 GB image) after `docker builder prune --all`: 8.0 GB at the peak, 5.5 GB kept
# (the image and its cache). Cells on nvidia/cuda bases add their base (about 3 GB runtime, 8 GB devel).
COLD_BUILD_PEAK = 8 * GB
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


def build_need(builds: int) -> int:
    return builds * COLD_BUILD_PEAK


def shortfall(root: DataRoot, need: int) -> str | None:
    """What to say when less than `need` bytes are free on the data root (None when enough is, or it is unknown)."""
    if root.free is None or root.free >= need:
        return None
    return (
        f"{gb(root.free)} free on the Docker data root {root.path}, {gb(need)} needed: `{usage.DISK}` shows what the "
        "engine holds and the commands that give space back"
    )
