"""`invoke disk` against the real engine: it names the data root `docker info` names and the free space the kernel
reports, stops with a message when too little is free, and the leaked-layer search never names a folder that an
image or a container uses (checked against what the engine itself says each one uses, `GraphDriver.Data`), even
with no age guard; a folder the engine does not know is found and removed with its short link.

Needs the Docker engine on this machine (its data root readable here); no built cell, though every local image and
container is checked. Without an engine these tests fail; DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from support import require_engine

from dlimages import disk
from dlimages.runner import DEFAULT as RUNNER
from dlimages.runner import Result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root() -> disk.DataRoot:
    require_engine(buildx=False)
    found = disk.data_root(RUNNER)
    assert found is not None
    if not found.local or found.driver != "overlay2":
        pytest.skip(f"the engine's data root is not a local overlay2 one here ({found})")
    return found


def invoke(*args: str) -> Result:
    return RUNNER([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args], timeout=600)


def test_disk_names_the_engines_data_root_and_its_free_space(root: disk.DataRoot) -> None:
    done = invoke("disk", "--no-engine-setup")
    assert done.code == 0, done.out + done.err
    docker_root = RUNNER.docker("info", "--format", "{{.DockerRootDir}}").out.strip()
    assert f"data root: {docker_root} (overlay2)" in done.out
    [free_line] = [line for line in done.out.splitlines() if line.startswith("free: ")]
    said = float(free_line.removeprefix("free: ").removesuffix(" GB")) * disk.GB
    assert abs(said - shutil.disk_usage(docker_root).free) < 2 * disk.GB  # other work goes on meanwhile
    assert "leaked layers: " in done.out


def test_too_little_free_space_stops_with_what_to_do(root: disk.DataRoot) -> None:
    done = invoke("disk", "--need", "1000000", "--no-engine-setup")
    assert done.code == 1, done.out + done.err
    assert f"on the Docker data root {root.path}, 1000000.0 GB needed" in done.err
    assert "`invoke disk --reclaim` gives back what it can" in done.err
    assert "Traceback" not in done.err


def test_a_negative_need_is_refused(root: disk.DataRoot) -> None:
    done = invoke("disk", "--need", "-1", "--no-engine-setup")
    assert done.code == 2 and "--need" in done.err and "0 or more GB" in done.err, done.out + done.err


def _in_use_by_the_engine() -> set[str]:
    """The overlay2 folders every image and container uses, as the engine itself reports them."""
    ids = RUNNER.docker("image", "ls", "--all", "--quiet", "--no-trunc").out.split()
    ids += RUNNER.docker("container", "ls", "--all", "--quiet", "--no-trunc").out.split()
    folders: set[str] = set()
    for object_id in dict.fromkeys(ids):
        done = RUNNER.docker("inspect", "--format", "{{json .GraphDriver.Data}}", object_id)
        data = json.loads(done.out) if done.ok and done.out.strip() not in ("", "null") else {}
        for key in ("UpperDir", "LowerDir", "WorkDir", "MergedDir"):
            for path in filter(None, str(data.get(key, "")).split(":")):
                folders.add(Path(path).parent.name)
    return folders


def test_no_folder_an_image_or_container_uses_is_ever_called_leaked(root: disk.DataRoot) -> None:
    RUNNER.docker("container", "create", "--name", f"dlimages-disk-{uuid.uuid4().hex[:8]}", "dlimages/base:debian12")
    try:
        in_use = _in_use_by_the_engine()
        assert in_use, "the engine reported no layer folder at all: nothing was checked"
        leaked = {leak.name for leak in disk.leaked_layers(root.path, now=time.time() + 10**9, min_age_s=0)}
        assert not (leaked & in_use)
    finally:
        for name in RUNNER.docker("container", "ls", "--all", "--quiet", "--filter", "name=dlimages-disk-").out.split():
            RUNNER.docker("container", "rm", "--force", name)


def test_a_folder_the_engine_does_not_know_is_found_and_removed_with_its_link(root: disk.DataRoot) -> None:
    name = f"dlimagestestleak{uuid.uuid4().hex[:9]}"
    link = f"DLIMAGESTEST{uuid.uuid4().hex[:14].upper()}"
    folder = root.path / "overlay2" / name
    (folder / "diff").mkdir(parents=True)
    (folder / "diff" / "payload").write_bytes(os.urandom(1 << 20))
    (folder / "link").write_text(link)
    (root.path / "overlay2" / disk.LINKS / link).symlink_to(f"../{name}/diff")
    try:
        old = time.time() - disk.MIN_AGE_S - 60
        for path in (folder / "diff" / "payload", folder / "diff", folder / "link", folder):
            os.utime(path, (old, old))
        [leak] = [leak for leak in disk.leaked_layers(root.path) if leak.name == name]
        assert leak.size >= 1 << 20 and leak.link == link
        disk.remove_leaked(root.path, [leak])
        assert not folder.exists()
        assert not (root.path / "overlay2" / disk.LINKS / link).is_symlink()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        (root.path / "overlay2" / disk.LINKS / link).unlink(missing_ok=True)
    assert RUNNER.docker("run", "--rm", "dlimages/base:debian12", "true").ok  # the engine is none the worse
