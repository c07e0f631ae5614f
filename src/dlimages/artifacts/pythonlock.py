"""The Python locks: each cell's complete package set, resolved by uv (generate/lock.py) for the cell's Python and
Linux platform, with every distribution's hash, committed beside the cell's Dockerfile; builds install from it and
nothing else.

A cell folder holds three files cut from one resolution: `requirements.lock` (everything: what the image keeps at
/opt/venv/requirements.lock), and two slices of it that give the install its layers: `pip.lock` (pip itself, which
installs the rest) and `framework.lock` (the framework and everything it pulls in, 5 GB that should not be
downloaded again when a package of the set changes). Each file starts with the digest of what the lock was resolved
from (`LockInput`), so `invoke lock --check` sees a lock that matrix.yaml has moved away from without resolving.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.utils import canonicalize_name as normalize  # PEP 503: Typing_Extensions is typing-extensions

from dlimages.artifacts.layout import cell_dir
from dlimages.core import usage
from dlimages.core.errors import Problem
from dlimages.model.cells import Cell
from dlimages.model.selection import flags_for

LOCK = "requirements.lock"
FRAMEWORK_LOCK = "framework.lock"
PIP_LOCK = "pip.lock"
LOCK_FILES = (LOCK, FRAMEWORK_LOCK, PIP_LOCK)
# glibc 2.28: every OS the matrix builds on has at least that (Ubuntu 20.04: 2.31), and manylinux wheels up to
# 2_28 cover every framework release of the matrix.
PLATFORM = "x86_64-manylinux_2_28"
FORMAT = 1  # bump when the lock layout changes, so every lock reads as stale
# Installed with pip in the venv's first step (pip.lock). The venv comes with the OS's own setuptools; were it
# replaced in a later step, that step's layer would hold whiteouts stamped with the time of the build.
BOOTSTRAP = ("pip", "setuptools")
BOOTSTRAP_UNPINNED = ("setuptools",)  # the newest the cell's Python and packages allow (the lock pins it)
INSTALL_FLAGS = "--no-deps --require-hashes --only-binary=:all:"


def install_flags(source_builds: Sequence[str] = ()) -> str:
    """pip's flags for installing a lock: exact files by hash, no resolution, wheels only (but the named sources)."""
    return INSTALL_FLAGS + (f" --no-binary={','.join(source_builds)}" if source_builds else "")


def installs_with_uv(cell: Cell, locked: bool) -> bool:
    """Whether the cell's locked steps install with uv (`uv_install`) rather than pip: a lock from PyPI (or its mirror)
    alone. A lock that takes the framework from PyTorch's index as well stays with pip, which takes each file by its
    hash from whichever index has it; uv would take each name from the first index that lists it."""
    return locked and not (cell.install.index_url or cell.install.find_links)


def uv_install(source_builds: Sequence[str] = ()) -> str:
    """uv's command for a lock in a build (uv bound in at /mnt/uv): the same files by hash as `install_flags`, into
    the venv, copied from uv's cache (a cache mount under /mnt, another file system, never in a layer). No bytecode:
    uv's is not the same from build to build; `COMPILE` makes it after."""
    return (
        "/mnt/uv pip install --python /opt/venv/bin/python --no-config --cache-dir /mnt/uv-cache "
        f"--link-mode copy {install_flags(source_builds)}"
    )


# After a uv install: the new modules' bytecode, in one process and one order (templates/assets/dl-compile).
COMPILE = "env PYTHONHASHSEED=0 /opt/venv/bin/python /mnt/dl-compile"


_DIGEST_LINE = re.compile(r"^# Input: (sha256:[0-9a-f]{64})$", re.MULTILINE)
_PIN_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?: \\)?$")


def requirement_name(requirement: str) -> str:
    return normalize(re.split(r"[\[=<>!~ ;]", requirement, maxsplit=1)[0])


@dataclass(frozen=True)
class LockInput:
    """What one cell's lock is resolved from. Its digest is written into the lock; a lock whose digest differs from
    the cell's current input is stale."""

    requirements: tuple[str, ...]  # pip, the framework (with its CUDA wheels and companions), the package set
    roots: tuple[str, ...]  # the framework's own requirement names: its closure is framework.lock
    python: str
    platform: str = PLATFORM
    extra_index_url: str | None = None  # PyTorch's CUDA-build index, asked before PyPI (generate/lock.compile_argv)
    find_links: str | None = None
    source_builds: tuple[str, ...] = ()  # the only packages allowed as source (sdist) rather than wheels

    @property
    def pypi_only(self) -> bool:
        return self.extra_index_url is None and self.find_links is None

    def text(self) -> str:
        """The requirements file uv resolves."""
        return "".join(f"{requirement}\n" for requirement in self.requirements)

    def digest(self) -> str:
        """The canonical JSON of every field (tuples as lists) and FORMAT, hashed."""
        canonical = json.dumps({"format": FORMAT, **asdict(self)}, sort_keys=True, separators=(",", ":")).encode()
        return f"sha256:{hashlib.sha256(canonical).hexdigest()}"


def lock_input(cell: Cell, pip_version: str) -> LockInput:
    install = cell.install
    return LockInput(
        requirements=(
            f"pip=={pip_version}",
            *BOOTSTRAP_UNPINNED,
            *install.requirements,
            *(f"{n}=={v}" for n, v in cell.packages),
        ),
        roots=tuple(dict.fromkeys(requirement_name(r) for r in install.requirements)),
        python=cell.python,
        extra_index_url=install.index_url,
        find_links=install.find_links,
        source_builds=install.source_builds,
    )


@dataclass(frozen=True)
class Pin:
    """One locked distribution as uv writes it: name==version, its hashes and what required it."""

    name: str  # normalised
    text: str  # the whole block (pin line, hash lines, `# via` lines), as uv wrote it
    parents: tuple[str, ...]  # normalised names of the packages that require it; "-r" when the input names it


def parse_compiled(text: str) -> list[Pin]:
    """The pins of uv's `pip compile --generate-hashes --no-header` output, in its (sorted) order."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _PIN_LINE.match(line):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return [_pin(block) for block in blocks]


def _pin(block: list[str]) -> Pin:
    match = _PIN_LINE.match(block[0])
    assert match is not None
    parents: list[str] = []
    for line in block[1:]:
        comment = line.strip().removeprefix("#").strip().removeprefix("via").strip()
        if not comment or line.strip().startswith("--hash"):
            continue
        parents.append("-r" if comment.startswith("-r ") else normalize(comment.split()[0]))
    return Pin(normalize(match.group(1)), "\n".join(block), tuple(parents))


def closure(pins: Sequence[Pin], roots: Iterable[str]) -> set[str]:
    """The roots and everything they require, transitively, read from uv's `# via` annotations."""
    children: dict[str, set[str]] = {}
    for pin in pins:
        for parent in pin.parents:
            children.setdefault(parent, set()).add(pin.name)
    wanted: set[str] = set()
    todo: list[str] = [normalize(root) for root in roots]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += children.get(name, ())
    return wanted


def header(cell: Cell, lock: LockInput, uv_version: str, part: str) -> str:
    index = "PyPI" if lock.pypi_only else "PyPI and " + (lock.extra_index_url or lock.find_links or "")
    return (
        f"# Generated by `{usage.LOCK}` ({uv_version}) from matrix.yaml: do not edit; "
        f"run `{usage.LOCK} {flags_for(cell)}` instead.\n"
        f"# Cell: {cell.slug} | Python {lock.python} | {lock.platform} | {index}\n"
        f"# Part: {part}\n"
        f"# Install: pip install {install_flags(lock.source_builds)} -r THIS_FILE\n"
        f"# Input: {lock.digest()}\n"
    )


def lock_files(cell: Cell, lock: LockInput, pins: Sequence[Pin], uv_version: str) -> dict[str, str]:
    """The three files of a cell's lock, from one resolution."""
    framework = closure(pins, lock.roots)
    parts = {
        LOCK: ("the complete environment", pins),
        FRAMEWORK_LOCK: ("the framework and what it requires", [p for p in pins if p.name in framework]),
        PIP_LOCK: ("pip and setuptools, installed first", [p for p in pins if p.name in BOOTSTRAP]),
    }
    return {
        name: header(cell, lock, uv_version, part) + "".join(f"{pin.text}\n" for pin in chosen)
        for name, (part, chosen) in parts.items()
    }


@dataclass(frozen=True)
class LockState:
    cell: Cell
    status: str  # "locked", "stale", "unlocked", "broken"
    detail: str = ""

    @property
    def locked(self) -> bool:
        """The cell's Dockerfile installs from its lock (a stale lock still does; `lock --check` fails on it)."""
        return self.status in ("locked", "stale")


def lock_state(root: Path, cell: Cell, pip_version: str) -> LockState:
    folder = cell_dir(root, cell)
    present = [name for name in LOCK_FILES if (folder / name).is_file()]
    if not present:
        return LockState(cell, "unlocked")
    if len(present) != len(LOCK_FILES):
        missing = ", ".join(sorted(set(LOCK_FILES) - set(present)))
        return LockState(cell, "broken", f"{missing} missing beside {', '.join(present)}")
    want = lock_input(cell, pip_version).digest()
    for name in LOCK_FILES:
        match = _DIGEST_LINE.search((folder / name).read_text(encoding="utf-8", errors="replace"))
        if match is None:
            return LockState(cell, "broken", f"{name} has no `# Input:` line (edited by hand?)")
        if match.group(1) != want:
            return LockState(cell, "stale", f"{name} was resolved from other pins, packages, Python or index")
    return LockState(cell, "locked")


def lock_problems(root: Path, cells: Iterable[Cell], pip_version: str) -> list[Problem]:
    """What `invoke lock --check` fails on: a stale or broken lock, and a PyPI-only cell without a lock (such a
    cell can always be locked, so there is no reason to build it unlocked)."""
    problems: list[Problem] = []
    for cell in cells:
        state = lock_state(root, cell, pip_version)
        where = f"images/{cell.framework}/{cell.slug}"
        run = f"run `{usage.LOCK} {flags_for(cell)}`"
        if state.status in ("stale", "broken"):
            problems.append(Problem(where, f"the lock is {state.status}: {state.detail}; {run}"))
        elif state.status == "unlocked" and lock_input(cell, pip_version).pypi_only:
            problems.append(Problem(where, f"no lock, though every package comes from PyPI; {run}"))
    return problems
