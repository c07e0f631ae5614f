"""Writing files so that a reader sees the old content or the new one, never half of it, and taking turns with
other processes of this repository (an advisory lock on a file), and reading a file a user names without hanging."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
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


class NotRegular(OSError):
    """A path that is not a regular file (a folder: EISDIR)."""


def read_regular(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """At most `limit` + 1 bytes of the regular file `path` (one more tells the caller it is larger). Opened without
    blocking and checked before any read: a FIFO would wait for a writer, a link to /dev/zero never end. Raises
    NotRegular for any other kind, and for a link unless `follow`; OSError when it cannot be opened."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except OSError as error:
        if error.errno == errno.ELOOP and not follow:
            raise NotRegular(errno.EINVAL, "not a regular file") from None
        raise
    with open(descriptor, "rb") as file:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise NotRegular(errno.EISDIR, "Is a directory")
        if not stat.S_ISREG(mode):
            raise NotRegular(errno.EINVAL, "not a regular file")
        return file.read(limit + 1)


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
