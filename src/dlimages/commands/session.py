"""What every command shares: the way a command fails (`Failed`), its progress lines, a Docker engine on demand."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from dlimages.building.engine import EngineRefused, EngineUnavailable, ensure_engine, setup_allowed
from dlimages.core.engines import Need
from dlimages.core.runner import DEFAULT as RUNNER


class Failed(Exception):
    """A command that ran and failed: `output` for stdout (printed first, when there is some), `message` for
    stderr (may be empty) and the exit code. Input problems are InputError instead (exit 2, before anything ran)."""

    def __init__(self, message: str = "", *, code: int = 1, output: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.output = output


def say(line: str) -> None:
    """A line of progress, shown at once (in order with the output of the commands a run starts)."""
    print(line, flush=True)


def echo(text: str | None) -> None:
    """A command's result on stdout (nothing for None)."""
    if text is not None:
        print(text, flush=True)


def reader_gone() -> int:
    """After a BrokenPipeError (`invoke matrix | head`): stdout goes nowhere from now on, so that nothing left to
    write fails again at exit; the exit code, 0, as for a reader that simply had enough."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def note(line: str) -> None:
    """A line for stderr, beside the result on stdout (which a script may be reading)."""
    print(line, file=sys.stderr)


def engine(root: Path, no_engine_setup: bool, *, need: Need = Need.BUILDKIT) -> None:
    """Make sure an engine answers: start one (scripts/engine.sh) unless the person manages Docker themselves. One
    that cannot serve `need` (core.engines) stops the task with exit 2, before it has done anything; on one that can
    but differs from a standard Docker, the task goes on and says how, once."""
    try:
        found = ensure_engine(root, RUNNER, setup=setup_allowed(no_engine_setup), on_line=say, need=need)
    except EngineRefused as error:
        raise Failed(f"error: {error}", code=2) from None
    except EngineUnavailable as error:
        raise Failed(f"error: {error}", code=1) from None
    for line in found.notes():
        _note_once(line)


@functools.cache
def _note_once(line: str) -> None:
    """A task may ask for the engine twice (a build that makes its base first): its note is said the first time."""
    note(f"note: {line}")
