"""The base's docker-archive against the real engine: written twice, apart in time and place, it loads as the image ID
dlimages.building.imagearchive computed, created at SOURCE_DATE_EPOCH, whoever loads it and whenever.

Uses a tiny layer made here, not the mmdebstrap tarball (`invoke base` loads that one). Needs a Docker engine with
the classic image store; without an engine the test fails, unless DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support import require_engine

from dlimages.building.imagearchive import DEBIAN_PATH, ImageConfig, write_docker_archive

if TYPE_CHECKING:
    from conftest import Docker

pytestmark = pytest.mark.integration

EPOCH = 1747699200
CREATED = "2025-05-20T00:00:00Z"
CREATED_BY = "test layer (SOURCE_DATE_EPOCH=1747699200)"


@pytest.fixture(scope="module")
def engine() -> None:
    require_engine(buildx=False)


@pytest.fixture
def tag(engine: None, docker: Docker) -> Iterator[str]:
    """A throwaway tag; whatever it names at the end is untagged (and, being this test's own, deleted)."""
    name = f"dlimages-test/base-load:{uuid.uuid4().hex[:12]}"
    yield name
    docker("rmi", name, check=False)


def make_layer(path: Path, marker: str) -> Path:
    """A few files, the same bytes for the same marker (which makes the image this test's own)."""
    files = {"etc/hostname": b"base\n", "etc/os-release": b"ID=debian\n", "etc/dlimages-test": marker.encode()}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as layer:
        for name in ["etc", *files]:
            info = tarfile.TarInfo(name)
            info.mtime = EPOCH
            if name in files:
                info.size = len(files[name])
                layer.addfile(info, io.BytesIO(files[name]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                layer.addfile(info)
    return path


def inspect(docker: Docker, ref: str) -> dict[str, Any]:
    found = json.loads(docker("image", "inspect", ref).out)[0]
    assert isinstance(found, dict)
    return found


def test_archive_written_twice_loads_as_the_computed_id(tag: str, docker: Docker, tmp_path: Path) -> None:
    layer = make_layer(tmp_path / "layer.tar", tag)
    config = ImageConfig(created_by=CREATED_BY)
    archives = [tmp_path / "first" / "base.tar", tmp_path / "second" / "base.tar"]
    ids = []
    for archive in archives:
        archive.parent.mkdir()
        ids.append(write_docker_archive(layer, archive, tag=tag, epoch=EPOCH, config=config))
        time.sleep(1.1)  # the second one is written in another second of wall-clock time
    assert ids[0] == ids[1]
    assert archives[0].read_bytes() == archives[1].read_bytes()

    loaded = []
    for archive in archives:
        assert f"Loaded image: {tag}" in docker("load", "-i", str(archive)).out
        found = inspect(docker, tag)
        loaded.append(found["Id"])
        assert found["Created"] == CREATED
        assert found["Config"]["Env"] == [DEBIAN_PATH] and found["Config"]["Cmd"] == ["bash"]
        assert found["RootFS"]["Layers"] == ["sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()]
        assert (found["Os"], found["Architecture"]) == ("linux", "amd64")
        # Gone again, so the second archive is loaded from nothing rather than matched to what is there.
        docker("rmi", tag)
        assert not docker("image", "inspect", found["Id"], check=False).ok
    assert loaded == ids
