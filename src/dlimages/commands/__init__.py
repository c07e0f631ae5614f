"""One function per task, of the task's name: its keyword-only parameters are the task's flags (tasks.py adds their
help, calls the function and prints what it returns). Each checks its flag values (InputError: exit 2, before
anything runs), starts an engine where it needs one, calls into the package, and returns the text to print (None:
nothing) or raises Failed with an exit code."""

from __future__ import annotations

from dlimages.commands.bases import apt_repo, base, bases_list, bases_mirror
from dlimages.commands.builds import bake, build, repro
from dlimages.commands.flags import CellFlags, flag_parameters
from dlimages.commands.generate import doctor, lock, matrix, render
from dlimages.commands.host import check, ci, disk, mirrors
from dlimages.commands.images import bench, package_diff, push, smoke, test, verify
from dlimages.commands.session import Failed, echo, reader_gone

__all__ = [
    "CellFlags",
    "Failed",
    "apt_repo",
    "bake",
    "base",
    "bases_list",
    "bases_mirror",
    "bench",
    "build",
    "check",
    "ci",
    "disk",
    "doctor",
    "echo",
    "flag_parameters",
    "lock",
    "matrix",
    "mirrors",
    "package_diff",
    "push",
    "reader_gone",
    "render",
    "repro",
    "smoke",
    "test",
    "verify",
]
