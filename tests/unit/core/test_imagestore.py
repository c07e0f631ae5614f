"""The image store an engine reports, and what a build's metadata file says it built."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from dlimages.core import imagestore
from dlimages.core.imagestore import CLASSIC, CONTAINERD, Built, config_digest, config_of, store_of
from dlimages.core.runner import Result, Runner

CONFIG, MANIFEST = "sha256:" + "c" * 64, "sha256:" + "d" * 64


def test_the_store_is_read_from_docker_infos_driver_status() -> None:
    assert store_of('[["driver-type","io.containerd.snapshotter.v1"]]') == CONTAINERD  # Docker 26 and 29
    assert store_of('[["Backing Filesystem","extfs"],["Supports d_type","true"],["Using metacopy","false"]]') == CLASSIC
    assert store_of("") == CLASSIC


def test_a_build_is_named_by_its_config_on_the_classic_store_and_its_manifest_on_containerd(tmp_path: Path) -> None:
    # What buildx 0.13 writes with --metadata-file (Docker 26.1.5, containerd store).
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"containerimage.config.digest": CONFIG, "containerimage.digest": MANIFEST}))
    built = Built.read(path)
    assert built == Built(CONFIG, MANIFEST)
    assert built.local_id(CLASSIC) == CONFIG and built.local_id(CONTAINERD) == MANIFEST
    assert Built(CONFIG, None).local_id(CONTAINERD) == CONFIG


def test_a_metadata_file_that_names_no_image_is_no_build(tmp_path: Path) -> None:
    assert Built.read(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{")
    assert Built.read(tmp_path / "bad.json") is None
    assert Built.of({"buildx.build.ref": "x"}) is None
    assert Built.of({"containerimage.config.digest": "sha256:abc"}) is None
    assert Built.of({"containerimage.config.digest": CONFIG, "containerimage.digest": "x"}) == Built(CONFIG, None)
    assert Built.of(["not", "a", "dict"]) is None


def test_the_config_digest_of_docker_saves_manifest_in_both_layouts() -> None:
    assert config_of([{"Config": f"blobs/sha256/{'c' * 64}", "Layers": []}]) == CONFIG  # containerd store (OCI)
    assert config_of([{"Config": f"{'c' * 64}.json", "Layers": []}]) == CONFIG  # classic store
    assert config_of([]) is None and config_of({"Config": "x"}) is None
    assert config_of([{"Config": "blobs/sha256/zz"}]) is None


def test_the_config_digest_on_the_containerd_store_is_read_from_docker_saves_manifest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("index.json", b"{}"), ("manifest.json", json.dumps([{"Config": f"{'c' * 64}.json"}]))):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data.encode() if isinstance(data, str) else data))
    saved = {"lab/x:v1": out.getvalue(), "lab/broken:v1": out.getvalue()[:700]}
    finished = []
    monkeypatch.setattr(
        imagestore, "docker_save", lambda ref: (io.BytesIO(saved[ref]), lambda: finished.append(ref) or Result((), 0))
    )
    runner = Runner(lambda argv, **_: subprocess.CompletedProcess(argv, 0, MANIFEST + "\n", ""))
    assert config_digest("lab/x:v1", runner, CLASSIC) == MANIFEST  # the classic store: the image ID, nothing saved
    assert config_digest("lab/x:v1", runner, CONTAINERD, Built(CONFIG, MANIFEST)) == CONFIG  # the build said it
    assert config_digest("lab/x:v1", runner, CONTAINERD) == CONFIG
    assert config_digest("lab/broken:v1", runner, CONTAINERD) is None
    assert finished == ["lab/x:v1", "lab/broken:v1"]
