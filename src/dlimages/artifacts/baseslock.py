"""The bases lock (images/bases.lock.json): the digest each registry base image's tag named when it was last
resolved, so that builds start FROM `tag@digest` and a rebuilt or deleted upstream tag (NVIDIA rebuilds and deletes
its CUDA tags) changes nothing.

Pure: `BaseLock.load`/`pinned`, `pulled_bases`; asking a registry is core/registry's, refreshing the lock
generate/baselock's, what a build starts FROM building/basesource's. Bases made here (`bootstrap_base` cells) are
never pulled, never locked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from dlimages.artifacts.layout import BASES_LOCK
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import read_regular, write_atomic
from dlimages.core.references import DIGEST, TAG_ALLOWED, quoted, tag_problem
from dlimages.model.cells import Cell

LOCK_FILE = Path(BASES_LOCK)  # relative to the repository root
COMMENT_KEY = "_comment"
COMMENT = (
    "The digest each registry base image tag named when last resolved; builds pull tag@digest. "
    f"Written by `{usage.BASES_LOCK}` (run it where the registries are reachable); do not edit by hand."
)
MAX_LOCK_BYTES = 1 << 20  # a few hundred bytes per base: anything near this is not a lock
DIGEST_ALLOWED = f"sha256: and 64 lowercase hex digits, as `{usage.BASES_LOCK}` writes it"
KEY_ALLOWED = f"{COMMENT_KEY!r} or {TAG_ALLOWED}"


def unpinned_warning(ref: str) -> str:
    return (
        f"base {ref} has no recorded digest in {LOCK_FILE.as_posix()}: pulled by tag, so this build is not "
        f"reproducible; `{usage.BASES_LOCK}` records it where the registry is reachable"
    )


@dataclass(frozen=True)
class BaseLock:
    """Tag -> digest, e.g. "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04" -> "sha256:<64 hex>": the digest of what
    the tag names (the manifest list or OCI index of a multi-platform tag), i.e. what `tag@digest` pulls."""

    digests: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Sorted and read-only: a lock is a value, and its order is the order it is written in.
        object.__setattr__(self, "digests", MappingProxyType(dict(sorted(self.digests.items()))))

    @classmethod
    def load(cls, path: Path) -> BaseLock:
        """The lock in `path`; a missing file is an empty lock. Every problem of a malformed file is reported at
        once (InputError), each naming the file, the key and what is allowed."""
        text = _read_text(path)
        if text is None:
            return cls()
        where = str(path)
        try:
            pairs = json.loads(text, object_pairs_hook=_Pairs)
        except json.JSONDecodeError as error:
            raise InputError(
                [Problem(f"{where}:{error.lineno}", f"is not JSON: {error.msg}", "a JSON object of tag -> digest")]
            ) from None
        if not isinstance(pairs, _Pairs):
            raise InputError([Problem(where, "is not a JSON object", "a JSON object of tag -> digest")])
        problems: list[Problem] = []
        digests: dict[str, str] = {}
        seen: set[str] = set()
        for key, value in pairs:
            problems += _entry_problems(where, key, value, duplicate=key in seen)
            seen.add(key)
            if key != COMMENT_KEY and isinstance(value, str):
                digests[key] = value
        if problems:
            raise InputError(problems, heading=f"{where} is not a valid bases lock:")
        return cls(digests)

    def pinned(self, ref: str) -> str | None:
        """`ref@sha256:...` when the lock records `ref`, else None."""
        digest = self.digests.get(ref)
        return None if digest is None else f"{ref}@{digest}"

    def text(self) -> str:
        """The file's content: the comment first, then the tags in sorted order, one per line; ASCII only."""
        return json.dumps({COMMENT_KEY: COMMENT, **self.digests}, indent=2, ensure_ascii=True) + "\n"

    def write(self, path: Path) -> None:
        """Write the lock atomically: a reader, or an interrupted write, sees the old file or the new one."""
        write_atomic(path, self.text())


class _Pairs(list[tuple[str, object]]):
    """A JSON object's members in file order, duplicates kept (json's dict would silently keep the last)."""


def _read_text(path: Path) -> str | None:
    """The UTF-8 text of a regular file of at most MAX_LOCK_BYTES, or None when there is no file."""
    try:
        raw = read_regular(path, MAX_LOCK_BYTES)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InputError([Problem(str(path), f"cannot read: {error.strerror}")]) from None
    if len(raw) > MAX_LOCK_BYTES:
        raise InputError([Problem(str(path), f"is larger than {MAX_LOCK_BYTES} bytes: not a bases lock")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise InputError([Problem(f"{path}:{line}", f"is not UTF-8 (byte 0x{raw[error.start]:02x})")]) from None


def _entry_problems(where: str, key: str, value: object, *, duplicate: bool) -> list[Problem]:
    shown = f"{where}: key {quoted(key, 300)}"
    if duplicate:
        return [Problem(shown, "appears more than once", "each key once")]
    if key == COMMENT_KEY:
        return [] if isinstance(value, str) else [Problem(shown, "is not a string", "a text comment")]
    if (problem := tag_problem(key)) is not None:
        return [Problem(shown, problem, KEY_ALLOWED)]
    if not (isinstance(value, str) and DIGEST.fullmatch(value)):
        return [Problem(shown, f"has the value {quoted(value)}, not a digest", DIGEST_ALLOWED)]
    return []


def pulled_bases(cells: Iterable[Cell]) -> list[str]:
    """The registry bases the cells start FROM, each once, sorted: not those made here (`bootstrap_base`), nor those
    the matrix already gives with @digest (pinned without the lock)."""
    return sorted({cell.base_image for cell in cells if not cell.bootstrap_base and "@" not in cell.base_image})
