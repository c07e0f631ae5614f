"""The folder a command writes its output into (`invoke apt-repo --to`), checked before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import Runner

ALLOWED = "a new folder, or one {command} made, outside the repository or where git ignores it (e.g. .work/NAME)"


def output_folder(given: str | None, flag: str, root: Path, *, command: str, marker: str, runner: Runner) -> Path:
    """`given` as a folder `command` may write into, or InputError saying why not: it is empty; it is a symlink
    or not a folder; it is the repository or a folder above it; it is in the repository where git does not ignore
    it (its files would enter the next commit, and `render --check` would see them in images/); it holds files and
    no `marker` (what the command leaves in every folder it made); or this user cannot write there."""
    allowed = ALLOWED.format(command=f"`{command}`")

    def refuse(message: str) -> InputError:
        return InputError([Problem(f"{flag} {given!r:.200}", message, allowed)])

    if given is None or not given.strip():
        raise InputError([Problem(flag, "is empty", allowed)])
    path = Path(given)
    if path.is_symlink():
        raise refuse("is a symlink (what it points to would be written)")
    if path.exists() and not path.is_dir():
        raise refuse("is not a folder")
    folder, repository = path.resolve(), root.resolve()
    if folder == repository or repository.is_relative_to(folder):
        raise refuse("is the repository, or a folder that holds it")
    if folder.is_relative_to(repository):
        ignored = runner(["git", "-C", str(repository), "check-ignore", "-q", str(folder.relative_to(repository))])
        if not ignored.ok:
            raise refuse("is in the repository where git does not ignore it (its files would be committed)")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / marker).is_file():
        raise refuse(f"holds files that {command} did not make (no {marker} in it)")
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise refuse(f"cannot be written: {existing} is not writable by this user")
    return folder
