"""The `dlimages` command: Invoke's own program over this repo's tasks.py, with one difference that Invoke cannot
be configured to make: a command line it cannot parse (an unknown task or flag, a missing or ill-typed flag value)
exits 2, the usage-error code of every task and payload script, instead of Invoke's 1.

`dlimages build --cuda 11.8 --torch 2.1` is `invoke build --cuda 11.8 --torch 2.1`, from any folder: tasks.py is
the one `invoke` finds (from the current folder upwards) where that is a dlimages clone's, else the one of the clone
this package is installed from (`pip install -e`); --search-root and --collection as in Invoke. Also refused before
Invoke prompts for it: --prompt-for-sudo-password, whose password no task would use.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke.exceptions import CollectionNotFound, Exit, ParseError
from invoke.program import Program

from dlimages import __version__

USAGE_ERROR = 2
PACKAGE = Path(__file__).resolve().parent


class DlimagesProgram(Program):
    """Invoke's Program, with parse errors (and Invoke's own ValueError for a flag of the wrong type) as exit 2, and
    this repository's tasks.py from any folder."""

    def parse_core(self, argv: list[str] | None) -> None:
        try:
            super().parse_core(argv)
        except (ParseError, ValueError) as error:
            raise _usage_error(error) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except (ParseError, ValueError) as error:
            raise _usage_error(error) from None

    def load_collection(self) -> None:
        if self.args["search-root"].value is None and self.args.collection.value is None:
            name = self.config.tasks.collection_name
            try:
                found = self.loader_class(config=self.config).find(name)
            except CollectionNotFound:
                found = None
            if found is None or found.origin is None or not is_clone(Path(found.origin).parent):
                self.args["search-root"].value = str(installed_clone())
        super().load_collection()

    def update_config(self, merge: bool = True) -> None:
        if self.args["prompt-for-sudo-password"].value:
            raise Exit(
                "error: --prompt-for-sudo-password: no task runs sudo through Invoke, the password would go unused "
                "(allowed: leave it out; where a task needs root, its message says so)",
                code=USAGE_ERROR,
            )
        super().update_config(merge)


def is_clone(folder: Path) -> bool:
    """A dlimages repository: its tasks.py beside its matrix.yaml (as tasks.py finds its root)."""
    return (folder / "tasks.py").is_file() and os.path.lexists(folder / "matrix.yaml")  # a broken one is its own


def installed_clone() -> Path:
    """The clone this package is installed from (editable), else exit 2 saying what to do."""
    root = PACKAGE.parents[1]
    if PACKAGE == root / "src/dlimages" and is_clone(root):  # src/ layout: an editable install of a clone
        return root
    raise Exit(
        f"error: no dlimages tasks.py in {Path.cwd()} or above, and this dlimages ({PACKAGE}) is not installed from a "
        "clone of its repository (allowed: run it in a clone, or install one with `pip install -e CLONE`)",
        code=USAGE_ERROR,
    )


def _usage_error(error: Exception) -> Exit:
    if isinstance(error, ParseError):
        return Exit(f"error: {error}", code=USAGE_ERROR)
    return Exit(f"error: a flag value has the wrong type ({error})", code=USAGE_ERROR)


program = DlimagesProgram(name="dlimages", binary="dlimages", version=__version__)


def main() -> None:
    try:
        program.run()
    except BrokenPipeError:  # `dlimages --list | head`: the reader has what it wanted; nothing more is written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
