"""Writing files so that a reader sees the old content or the new one, never half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REGULAR = 0o644


def write_atomic(path: Path, content: str | bytes, mode: int = REGULAR) -> None:
    """Write `content` to `path` through a temporary file in the same folder and one rename."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
