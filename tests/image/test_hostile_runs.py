"""Hostile and careless input against the real engine: `invoke smoke` and `invoke bench` refuse an image docker
would read as an option, and never pull an image that is not local (a typo, or a `lab/...` name before the first
build, would otherwise be fetched from whoever owns that name on Docker Hub and run with the GPUs attached).

Needs the Docker engine; no built cell. Without an engine these tests fail, so a broken CI host is not mistaken
for a green one; DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NEVER_BUILT = f"lab/never-built-{os.getpid()}:v1.0"  # a name nobody built here, in the namespace builds use


@pytest.fixture(scope="module")
def engine() -> None:
    require_engine(buildx=False)


def invoke(*args: str) -> Result:
    return RUNNER([sys.executable, "-m", "invoke", *args], timeout=300)


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("task", ["smoke", "bench"])
def test_an_image_that_reads_as_an_option_is_refused_not_passed(task: str) -> None:
    # Before: `docker run --rm --gpus all --help dl-smoke` printed docker's help and smoke said "exit 0 (passed)".
    done = invoke(task, "--image=--help")
    assert done.code == 2, done.out + done.err
    assert done.err.startswith("error: --image '--help': starts with '-' (docker would read it as an option)")
    assert done.out == "" and "Traceback" not in done.err


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("task", ["smoke", "bench"])
def test_an_image_that_is_not_local_is_never_pulled(task: str) -> None:
    assert RUNNER.image_id(NEVER_BUILT) is None
    done = invoke(task, "--image", NEVER_BUILT)
    assert done.code == 2, done.out + done.err
    assert (
        f"error: {NEVER_BUILT} is not a local image (nothing was pulled): build it with `invoke build ...`" in done.out
    )
    assert "Unable to find image" not in done.out + done.err  # what docker says before it pulls
    assert RUNNER.image_id(NEVER_BUILT) is None
