"""The Docker engine on demand: a task that needs one and finds none starts it the way CI does (scripts/engine.sh),
unless the person manages Docker themselves (`--no-engine-setup`, or DLIMAGES_NO_ENGINE_SETUP=1). An engine that
answers but cannot do what the task needs (core.engines: Podman, no buildx) is refused before anything starts."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from dlimages.building.mirrors import debian_mirrors
from dlimages.core.engines import Engine, Need
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.core.usage import ENGINE_SCRIPT

NO_SETUP_VARIABLE = "DLIMAGES_NO_ENGINE_SETUP"
NO_SETUP_HELP = f"never start a Docker engine (also {NO_SETUP_VARIABLE}=1): for hosts where you manage Docker"
_FALSE = ("", "0", "false", "no", "off")


class EngineUnavailable(Exception):
    """No engine answers and none could be started (or starting one was turned off); the message says what to do."""


class EngineRefused(Exception):
    """An engine answers, but the task cannot work on it; the message says what works there and what does not."""


def setup_allowed(no_engine_setup: bool, environ: Mapping[str, str] = os.environ) -> bool:
    return not no_engine_setup and environ.get(NO_SETUP_VARIABLE, "").strip().lower() in _FALSE


def engine_script_argv(root: Path) -> list[str]:
    """`bash scripts/engine.sh --mirror URL`: the mirror read here (the one reader of apt sources), so the script
    needs no Python of its own; without one found, the script's own lookup says why."""
    argv = ["bash", str(root / ENGINE_SCRIPT)]
    try:
        return [*argv, "--mirror", debian_mirrors()[0].rstrip("/")]
    except InputError:
        return argv


def ensure_engine(
    root: Path, runner: Runner, *, setup: bool, on_line: Callable[[str], None], need: Need = Need.BUILDKIT
) -> Engine:
    """The engine that answers; started with scripts/engine.sh (saying so) when none does and `setup`, else
    EngineUnavailable with what is wrong and how to fix it. EngineRefused when it cannot serve `need`."""
    found = runner.engine()
    if isinstance(found, str):
        found = _start(root, runner, found, setup=setup, on_line=on_line)
    refused = found.refusal(need)
    if refused:
        raise EngineRefused(refused)
    return found


def _start(root: Path, runner: Runner, problem: str, *, setup: bool, on_line: Callable[[str], None]) -> Engine:
    if not setup:
        raise EngineUnavailable(
            f"{problem}; not starting one ({NO_SETUP_VARIABLE} or --no-engine-setup): start your Docker engine, "
            f"or run `bash {ENGINE_SCRIPT}`"
        )
    if os.geteuid() != 0:
        raise EngineUnavailable(
            f"{problem}; installing and starting one needs root: `sudo bash {ENGINE_SCRIPT}` once (then a member of "
            "the docker group needs no root), or start your Docker engine"
        )
    on_line(f"{problem}: starting one with {ENGINE_SCRIPT} (--no-engine-setup turns this off)")
    code = runner.stream(engine_script_argv(root), on_line)
    found = runner.engine()
    if code != 0 or isinstance(found, str):
        said = found if isinstance(found, str) else "the engine answers"
        raise EngineUnavailable(f"{ENGINE_SCRIPT} exited {code} and {said}; see its output")
    return found
