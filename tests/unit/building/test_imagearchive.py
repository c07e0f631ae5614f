"""The base's docker-archive, without Docker: the same inputs give the same bytes and image ID; the ID is the
sha256 of the config, the diff_id that of the layer; the CLI names every bad input, exits 2 and writes nothing."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from dlimages.building import imagearchive
from dlimages.building.imagearchive import DEBIAN_PATH, ImageConfig, config_json, write_docker_archive
from dlimages.core.errors import InputError

EPOCH = 1747699200  # 2025-05-20T00:00:00Z
TAG = "dlimages-test/base:debian12"
DIGEST = "sha256:" + "ab" * 32


class _Zeros:
    """`size` zero bytes, read in pieces: a big layer member without holding it in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, size: int = -1) -> bytes:
        n = self.left if size < 0 else min(size, self.left)
        self.left -= n
        return bytes(n)


def make_layer(path: Path, files: dict[str, bytes] | None = None, *, big: int = 0) -> Path:
    """A small root filesystem as an uncompressed tar, the same bytes every time (plus `big` zero bytes in /big)."""
    files = {"etc/hostname": b"base\n", "etc/os-release": b"ID=debian\n"} if files is None else files
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
        if big:
            info = tarfile.TarInfo("big")
            info.size, info.mtime = big, EPOCH
            layer.addfile(info, _Zeros(big))
    return path


@pytest.fixture
def layer(tmp_path: Path) -> Path:
    return make_layer(tmp_path / "layer.tar")


def write(layer: Path, out: Path, *, tag: str = TAG, epoch: int = EPOCH, config: ImageConfig | None = None) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_docker_archive(layer, out, tag=tag, epoch=epoch, config=config or ImageConfig())


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def manifest(archive: Path) -> dict[str, Any]:
    entries = json.loads(members(archive)["manifest.json"])
    assert isinstance(entries, list) and len(entries) == 1
    entry = entries[0]
    assert isinstance(entry, dict)
    return entry


def config_of(archive: Path) -> dict[str, Any]:
    config = json.loads(members(archive)[manifest(archive)["Config"]])
    assert isinstance(config, dict)
    return config


# --- Reproducible ---------------------------------------------------------------------------------------------


def test_same_inputs_give_byte_identical_archives_and_the_same_id(layer: Path, tmp_path: Path) -> None:
    first = write(layer, tmp_path / "one" / "base.tar")
    os.utime(layer, (1, 1))  # the layer file's own time is not part of the archive
    second = write(layer, tmp_path / "two" / "base.tar")
    assert first == second
    assert (tmp_path / "one" / "base.tar").read_bytes() == (tmp_path / "two" / "base.tar").read_bytes()


def test_the_tag_names_the_image_but_is_not_part_of_its_id(layer: Path, tmp_path: Path) -> None:
    assert write(layer, tmp_path / "a.tar") == write(layer, tmp_path / "b.tar", tag="other/name:v1")
    assert manifest(tmp_path / "b.tar")["RepoTags"] == ["other/name:v1"]


def test_epoch_and_config_are_part_of_the_id(layer: Path, tmp_path: Path) -> None:
    ids = {
        write(layer, tmp_path / "a.tar"),
        write(layer, tmp_path / "b.tar", epoch=EPOCH + 1),
        write(layer, tmp_path / "c.tar", config=ImageConfig(created_by="mmdebstrap --variant=apt")),
        write(make_layer(tmp_path / "other.tar", {"etc/hostname": b"other\n"}), tmp_path / "d.tar"),
    }
    assert len(ids) == 4


# --- What the archive holds ------------------------------------------------------------------------------------


def test_the_id_is_the_sha256_of_the_config_member(layer: Path, tmp_path: Path) -> None:
    image_id = write(layer, tmp_path / "base.tar")
    entry = manifest(tmp_path / "base.tar")
    assert entry["Config"] == image_id.removeprefix("sha256:") + ".json"
    assert image_id == "sha256:" + hashlib.sha256(members(tmp_path / "base.tar")[entry["Config"]]).hexdigest()


def test_the_diff_id_is_the_sha256_of_the_layer_copied_unchanged(layer: Path, tmp_path: Path) -> None:
    write(layer, tmp_path / "base.tar")
    diff_id = "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    assert config_of(tmp_path / "base.tar")["rootfs"] == {"diff_ids": [diff_id], "type": "layers"}
    layer_member = diff_id.removeprefix("sha256:") + "/layer.tar"
    assert manifest(tmp_path / "base.tar") == {
        "Config": manifest(tmp_path / "base.tar")["Config"],
        "Layers": [layer_member],
        "RepoTags": [TAG],
    }
    assert members(tmp_path / "base.tar")[layer_member] == layer.read_bytes()


def test_config_is_the_official_debian_images_with_created_at_the_epoch(layer: Path, tmp_path: Path) -> None:
    write(layer, tmp_path / "base.tar", config=ImageConfig(created_by="mmdebstrap bookworm (SOURCE_DATE_EPOCH=1)"))
    config = config_of(tmp_path / "base.tar")
    assert config == {
        "architecture": "amd64",
        "config": {"Cmd": ["bash"], "Env": [DEBIAN_PATH]},
        "created": "2025-05-20T00:00:00Z",
        "history": [{"created": "2025-05-20T00:00:00Z", "created_by": "mmdebstrap bookworm (SOURCE_DATE_EPOCH=1)"}],
        "os": "linux",
        "rootfs": config["rootfs"],
    }
    assert DEBIAN_PATH == "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_config_json_is_canonical() -> None:
    # Pinned byte for byte: a change here changes the base's image ID, and with it every image built on it.
    assert config_json(DIGEST, epoch=0, config=ImageConfig()) == (
        b'{"architecture":"amd64","config":{"Cmd":["bash"],"Env":["' + DEBIAN_PATH.encode() + b'"]},'
        b'"created":"1970-01-01T00:00:00Z","history":[{"created":"1970-01-01T00:00:00Z",'
        b'"created_by":"mmdebstrap --variant=minbase --format=tar"}],"os":"linux",'
        b'"rootfs":{"diff_ids":["' + DIGEST.encode() + b'"],"type":"layers"}}'
    )


def test_members_are_sorted_dated_at_the_epoch_and_owned_by_root(layer: Path, tmp_path: Path) -> None:
    archive = tmp_path / "base.tar"
    write(layer, archive)
    with tarfile.open(archive) as tar:
        found = tar.getmembers()
        assert tar.pax_headers == {}
    names = [m.name for m in found]
    assert names == sorted(names) and "manifest.json" in names and len(names) == 3
    for member in found:
        assert member.isreg() and member.mode == 0o644 and member.mtime == EPOCH
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
        assert member.pax_headers == {}  # plain USTAR headers: nothing a reader could vary on
    data = archive.read_bytes()
    assert data[257:265] == b"ustar\x0000"
    assert len(data) % tarfile.RECORDSIZE == 0
    assert archive.stat().st_mode & 0o777 == 0o644


def test_the_layer_is_streamed_not_read_whole(tmp_path: Path) -> None:
    big = 32 << 20
    layer = make_layer(tmp_path / "layer.tar", big=big)
    tracemalloc.start()
    try:
        write(layer, tmp_path / "base.tar")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "base.tar").stat().st_size > big
    assert peak < 4 << 20, f"peak {peak} bytes while writing a {big}-byte layer"


# --- Nothing half-written ------------------------------------------------------------------------------------------


def test_a_layer_that_changes_while_it_is_copied_leaves_nothing(
    layer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "base.tar"
    out.write_bytes(b"the previous archive")
    hashed = imagearchive.layer_diff_id

    def hash_then_grow(path: Path) -> str:
        digest = hashed(path)
        with path.open("ab") as grow:  # another writer, between hashing and copying
            grow.write(bytes(tarfile.RECORDSIZE))
        return digest

    monkeypatch.setattr(imagearchive, "layer_diff_id", hash_then_grow)
    with pytest.raises(InputError, match="changed while it was copied; write the archive again"):
        write(layer, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.tar", "layer.tar"]
    assert out.read_bytes() == b"the previous archive"


def test_a_failed_write_leaves_nothing(layer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        write(layer, tmp_path / "base.tar")
    assert [p.name for p in tmp_path.iterdir()] == ["layer.tar"]


def test_a_bad_layer_or_folder_is_refused_and_nothing_is_written(layer: Path, tmp_path: Path) -> None:
    (tmp_path / "layer.tar.gz").write_bytes(gzip.compress(layer.read_bytes(), mtime=0))
    with pytest.raises(InputError, match="is not an uncompressed tar archive"):
        write_docker_archive(
            tmp_path / "layer.tar.gz", tmp_path / "base.tar", tag=TAG, epoch=EPOCH, config=ImageConfig()
        )
    with pytest.raises(InputError, match="does not exist"):
        write_docker_archive(layer, tmp_path / "no" / "base.tar", tag=TAG, epoch=EPOCH, config=ImageConfig())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer.tar", "layer.tar.gz"]
