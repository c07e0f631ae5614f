"""A push's own folder under .work/ (its compressed layouts, and a journal of the temporary tags it makes), locked
while the push lives. A push killed with SIGKILL cleans up nothing, so each push first sweeps what dead pushes left:
their folders (1.5-2.3 GB for a PyTorch cell) and the temporary tags their journals name."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

from dlimages.core.runner import Runner

JOURNAL = "tags"
YOUNG_S = 60.0  # a folder this new may belong to a push that has not locked it yet


class Scratch:
    """`.work/push-*`, flock-ed for as long as this push runs (the lock dies with the process, however it dies)."""

    def __init__(self, root: Path) -> None:
        work = root / ".work"
        work.mkdir(exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="push-", dir=work))
        self._lock = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    def note_tag(self, remote: str, ref: str, local_id: str) -> None:
        """Written down before `docker tag REF REMOTE`, so a sweep can remove the tag if this push dies."""
        with (self.folder / JOURNAL).open("a", encoding="utf-8") as journal:
            journal.write(f"{remote} {ref} {local_id}\n")
            journal.flush()
            os.fsync(journal.fileno())

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        os.close(self._lock)


def sweep(root: Path, runner: Runner) -> list[str]:
    """Remove the folders of pushes that died, and each temporary tag they noted while both it and the pushed ref
    still name the image they tagged (a moved tag, or an image's last name, is not ours to remove); what was
    removed, in words."""
    removed = []
    for folder in sorted((root / ".work").glob("push-*")):
        try:
            if time.time() - folder.stat().st_mtime < YOUNG_S:
                continue
            lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a push is running with it
            with contextlib.suppress(OSError):
                for line in (folder / JOURNAL).read_text(encoding="utf-8").splitlines():
                    remote, ref, local_id = line.split(" ")
                    if runner.image_id(remote) == local_id and untag(runner, ref, remote, local_id) is None:
                        removed.append(f"the temporary tag {remote}")
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"{folder.name}, left by a push that was stopped")
        finally:
            os.close(lock)
    return removed


def untag(runner: Runner, ref: str, remote: str, local_id: str) -> str | None:
    """Remove the registry-prefixed tag this run made; None when done, else why it stays.

    Only while `ref` still holds the image, so rmi can only untag: if `ref` was rebuilt meanwhile, the temporary
    tag is the image's last name and removing it would delete the image.
    """
    if runner.image_id(remote) != local_id:
        return None  # someone else moved or removed it: no longer ours
    if runner.image_id(ref) != local_id:
        return (
            f"{ref} now names another image (rebuilt during the push?), so what was pushed is not what {ref} is; "
            f"{remote} was kept because it is the pushed image's last tag: `docker rmi {remote}` deletes it"
        )
    done = runner.docker("rmi", "--no-prune", remote)
    if not done.ok:
        return f"could not remove the temporary tag {remote}: {done.last_line}"
    return None
