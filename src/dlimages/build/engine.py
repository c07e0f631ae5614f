"""The Docker engine on demand: a task that needs one and finds none starts it the way CI does (scripts/engine.sh),
unless the person manages Docker themselves (`--no-engine-setup`, or DLIMAGES_NO_ENGINE_SETUP=1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from dlimages.build.mirrors import debian_mirrors
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner

ENGINE_SCRIPT = Path("scripts/engine.sh")  # relative to the repository root
NO_SETUP_VARIABLE = "DLIMAGES_NO_ENGINE_SETUP"
NO_SETUP_HELP = f"never start a Docker engine (also {NO_SETUP_VARIABLE}=1): for hosts where you manage Docker"
_FALSE = ("", "0", "false", "no", "off")


class EngineUnavailable(Exception):
    """No engine answers and none could be started (or starting one was turned off); the message says what to do."""


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
    root: Path, runner: Runner, *, setup: bool, on_line: Callable[[str], None], buildx: bool = True
) -> None:
    """Return when an engine answers; start one with scripts/engine.sh (saying so) when `setup`, else raise
    EngineUnavailable with what is wrong and how to fix it."""
    problem = runner.engine_problem(buildx=buildx)
    if problem is None:
        return
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
    problem = runner.engine_problem(buildx=buildx)
    if code != 0 or problem is not None:
        raise EngineUnavailable(f"{ENGINE_SCRIPT} exited {code} and {problem or 'the engine answers'}; see its output")
