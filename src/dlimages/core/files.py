"""Writing files so that a reader sees the old content or the new one, never half of it, and taking turns with
other processes of this repository (an advisory lock on a file)."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REGULAR = 0o644
STAGED = ".tmp"  # the suffix of a file written beside its target, before it replaces it


def stage(path: Path, content: str | bytes, mode: int = REGULAR, *, suffix: str = STAGED) -> Path:
    """A new file beside `path` (same folder, so one rename replaces `path` with it) holding `content`, synced to
    disk: `os.replace(staged, path)` then swaps it in whole. Nothing is left behind when writing it fails."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_atomic(path: Path, content: str | bytes, mode: int = REGULAR) -> None:
    """Write `content` to `path` through a temporary file in the same folder and one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = stage(path, content, mode)
    try:
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


@contextmanager
def turn(path: Path, *, shared: bool = False, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an advisory lock on `path` (created with its folder if need be) for the block: exclusive, or `shared`
    with other shared holders. Waits while another process holds it, calling `on_wait` once first. The kernel lets
    go when the process ends, however it ends, so a killed holder never blocks the next one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, REGULAR)
    try:
        kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, kind)
        yield
    finally:
        os.close(fd)
