"""`invoke disk` against the real engine: it names the data root `docker info` names and the free space the kernel
reports, stops with a message when too little is free, refuses a malformed --need, and changes nothing on the
engine (the same images and build cache before and after). As an unprivileged member of the `docker` group, which
cannot see inside the data root, .ci/as-user.sh runs it too.

Without an engine these tests fail; DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from support import require_engine

from dlimages.building import disk
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root() -> disk.DataRoot:
    require_engine(buildx=False)
    found = disk.data_root(RUNNER)
    assert found is not None
    return found


def invoke(*args: str) -> Result:
    return RUNNER([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args], timeout=600)


def engine_state() -> tuple[list[str], list[str]]:
    """Every image and every build-cache record (by ID: their "last used" times move when the engine is asked)."""
    images = RUNNER.docker("image", "ls", "--all", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}")
    cache = RUNNER.docker("buildx", "du", "--verbose")
    records = [line for line in cache.out.splitlines() if line.startswith("ID:")]
    assert images.ok and cache.ok and records, cache.err
    return sorted(images.out.splitlines()), sorted(records)


def test_disk_names_the_engines_data_root_and_its_free_space_and_changes_nothing(root: disk.DataRoot) -> None:
    before = engine_state()
    done = invoke("disk", "--no-engine-setup")
    assert done.ok, done.err
    info = json.loads(RUNNER.docker("info", "--format", "{{json .DockerRootDir}}").out)
    assert f"data root: {info} " in done.out
    [free_line] = [line for line in done.out.splitlines() if line.startswith("free: ")]
    said = float(free_line.removeprefix("free: ").removesuffix(" GB")) * disk.GB
    assert abs(said - shutil.disk_usage(info).free) < 2 * disk.GB  # other work goes on meanwhile
    assert "docker builder prune" in done.out and "Build Cache" in done.out
    assert engine_state() == before


def test_too_little_free_space_stops_with_what_to_do(root: disk.DataRoot) -> None:
    done = invoke("disk", "--need", "999999", "--no-engine-setup")
    assert done.code == 1 and "Traceback" not in done.err
    assert "999999.0 GB needed" in done.err and "`invoke disk` shows what the engine holds" in done.err


@pytest.mark.parametrize("need", ["abc", "-1", "\uff11"])
def test_a_malformed_need_is_refused_before_the_engine_is_asked(need: str) -> None:
    done = invoke("disk", "--need", need, "--no-engine-setup")
    assert done.code == 2 and "--need" in done.err and "Traceback" not in done.err + done.out
