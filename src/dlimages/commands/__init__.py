"""One function per task, of the task's name, all listed in TASKS: its keyword-only parameters are the task's flags
(tasks.py reads them with their help, calls the function and prints what it returns). Each checks its flag values
(InputError: exit 2, before anything runs), starts an engine where it needs one, calls into the package, and returns
the text to print (None: nothing) or raises session.Failed with an exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlimages.commands.bases import apt_repo, base, bases_list, bases_mirror
from dlimages.commands.builds import bake, build, repro
from dlimages.commands.flags import flag_rows
from dlimages.commands.generate import doctor, lock, matrix, render
from dlimages.commands.host import check, ci, disk, mirrors
from dlimages.commands.images import bench, package_diff, push, smoke, test, verify
from dlimages.core import usage
from dlimages.generate.docsblocks import USING, Block
from dlimages.generate.templating import environment

# Every task of tasks.py (a test holds them equal).
TASKS: tuple[Callable[..., object], ...] = (apt_repo, bake, base, bases_list, bases_mirror, bench, build, check, ci)
TASKS += (disk, doctor, lock, matrix, mirrors, package_diff, push, render, repro, smoke, test, verify)


def task_line(command: Callable[..., object]) -> str:
    """The task of a command as typed: `invoke bases.list`, `invoke apt-repo`."""
    return usage.invoke(command.__name__.replace("bases_", "bases.").replace("_", "-"))


def flags_block(root: Path) -> Block:
    """docs/using.md's list of every task's flags, from their declarations: what `invoke TASK --help` shows."""
    tasks = [(task_line(command), flag_rows(command, root)) for command in sorted(TASKS, key=task_line)]
    return Block(USING, "flags", environment(root).get_template("docs/flags.md.j2").render(tasks=tasks))
