"""The offline base as a docker-archive (what `docker save` writes and `docker load` reads) whose every byte follows
from the layer tarball, the tag and SOURCE_DATE_EPOCH, so its image ID is the same on every machine.

`docker import` stamps the image config with the time of the import; here `created` is the epoch and the JSON is
canonical, so the image ID (the sha256 of the config) depends on the layer alone (`docker load -i` of the archive
gives that image ID on the classic store; the config the manifest names on the containerd store). `invoke base`
writes the offline bases with it (building/base.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from dlimages.core.errors import InputError, Problem
from dlimages.core.references import tagged_ref_problem

# As in the official debian image: PATH set, `bash` as the command, nothing else.
DEBIAN_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_CREATED_BY = "mmdebstrap --variant=minbase --format=tar"
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z, the last second RFC 3339's four-digit year can write
MAX_CREATED_BY = 1000
CHUNK = 1 << 20  # the layer is read in chunks of this size, never whole (a base layer is 100+ MB)
MEMBER_MODE = 0o644
ARCHIVE_MODE = 0o644  # mkstemp makes 0600; `docker load` by another user should work

LAYER_ALLOWED = "a plain .tar, as mmdebstrap --format=tar writes"
TAG_ALLOWED = "repository:tag, e.g. dlimages/base:debian12"
EPOCH_ALLOWED = f"whole seconds since 1970 in ASCII digits, 0 to {MAX_EPOCH}, e.g. 1747699200"
CREATED_BY_ALLOWED = f"printable ASCII, 1 to {MAX_CREATED_BY} characters"


@dataclass(frozen=True)
class ImageConfig:
    """What a container of the image starts with, and how `docker history` names its one layer.

    The defaults are the official debian image's Env and Cmd; `created_by` should say how the layer was made
    (e.g. the mmdebstrap command) without paths of the machine that made it: it is part of the image ID.
    """

    env: tuple[str, ...] = (DEBIAN_PATH,)
    cmd: tuple[str, ...] = ("bash",)
    created_by: str = DEFAULT_CREATED_BY
    architecture: str = "amd64"  # what mmdebstrap builds on the machines this project runs on


def rfc3339(epoch: int) -> str:
    """1747699200 -> "2025-05-20T00:00:00Z" (UTC, whole seconds: how `docker image inspect` shows Created)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(value: object) -> bytes:
    """Sorted keys, no spaces, ASCII: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def config_json(diff_id: str, *, epoch: int, config: ImageConfig) -> bytes:
    """The image config (docker image spec v1.2) of a one-layer image, canonical: its sha256 is the image ID."""
    created = rfc3339(epoch)
    return canonical_json(
        {
            "architecture": config.architecture,
            "config": {"Cmd": list(config.cmd), "Env": list(config.env)},
            "created": created,
            "history": [{"created": created, "created_by": config.created_by}],
            "os": "linux",
            "rootfs": {"diff_ids": [diff_id], "type": "layers"},
        }
    )


def layer_diff_id(layer: Path) -> str:
    """The layer's diff_id: the sha256 of the uncompressed tarball, read in chunks."""
    digest = hashlib.sha256()
    with layer.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def archive_problems(layer: Path, out: Path, *, tag: str, epoch: int, config: ImageConfig) -> list[Problem]:
    """Everything wrong with the inputs of `write_docker_archive`, found before anything is written."""
    problems: list[Problem] = []
    layer_problem = _layer_problem(layer)
    if layer_problem is not None:
        problems.append(layer_problem)
    if not out.parent.is_dir():
        problems.append(Problem("--out", f"the folder {out.parent} does not exist"))
    elif out.is_dir():
        problems.append(Problem("--out", f"{out} is a folder; give the archive's file name"))
    elif layer_problem is None and out.exists() and out.samefile(layer):
        problems.append(Problem("--out", f"{out} is the layer itself; give another file name"))
    problem = tagged_ref_problem(  # the name the archive gives its image: `docker load` takes repository:tag only
        tag,
        digest_why="an archive names its image by repository:tag",
        untagged_why="docker load refuses a repository without one",
    )
    if problem is not None:
        problems.append(Problem("--tag", f"{tag[:80]!r} {problem}", TAG_ALLOWED))
    if not 0 <= epoch <= MAX_EPOCH:
        problems.append(Problem("--epoch", f"{epoch} is out of range", EPOCH_ALLOWED))
    text = config.created_by
    if not (text and len(text) <= MAX_CREATED_BY and text.isascii() and text.isprintable()):
        problems.append(Problem("--created-by", "is empty, too long or not printable ASCII", CREATED_BY_ALLOWED))
    return problems


def _layer_problem(layer: Path) -> Problem | None:
    if not layer.exists():
        return Problem("--layer", f"{layer} does not exist")
    if not layer.is_file():
        return Problem("--layer", f"{layer} is not a regular file")
    try:
        # Reads the first header only. A compressed tarball would load, but with another diff_id than its sha256.
        with tarfile.open(layer, mode="r:"):
            pass
    except tarfile.ReadError:
        return Problem("--layer", f"{layer} is not an uncompressed tar archive", LAYER_ALLOWED)
    except OSError as error:
        return Problem("--layer", f"{layer} cannot be read ({error.strerror or error})")
    return None


def write_docker_archive(layer_tar: Path, out: Path, *, tag: str, epoch: int, config: ImageConfig) -> str:
    """Write a docker-archive of one layer to `out` (atomically) and return its image ID (`sha256:` + hex).

    Members are sorted, dated `epoch`, owned by 0:0 without user or group names; the layer is streamed. The same
    layer, tag, epoch and config give the same bytes and the same ID anywhere. InputError (nothing written) for
    bad inputs, or when the layer changes while it is copied.
    """
    problems = archive_problems(layer_tar, out, tag=tag, epoch=epoch, config=config)
    if problems:
        raise InputError(problems)
    diff_id = layer_diff_id(layer_tar)
    config_bytes = config_json(diff_id, epoch=epoch, config=config)
    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    config_name = image_id.removeprefix("sha256:") + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = canonical_json([{"Config": config_name, "Layers": [layer_name], "RepoTags": [tag]}])
    small = {config_name: config_bytes, "manifest.json": manifest}

    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            # PAX is byte-identical to USTAR here (ASCII names under 100 characters, integer times) and, unlike
            # USTAR, still takes a layer over 8 GiB.
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as archive:
                for name in sorted([*small, layer_name]):
                    if name == layer_name:
                        _add_layer(archive, layer_name, layer_tar, diff_id, epoch)
                    else:
                        archive.addfile(_member(name, len(small[name]), epoch), io.BytesIO(small[name]))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, ARCHIVE_MODE)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return image_id


def _member(name: str, size: int, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = epoch
    info.mode = MEMBER_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_layer(archive: tarfile.TarFile, name: str, layer: Path, diff_id: str, epoch: int) -> None:
    """Copy the layer in chunks, hashing what is copied: a layer rewritten since it was hashed is an error."""
    with layer.open("rb") as source:
        size = os.fstat(source.fileno()).st_size
        copied = _HashingReader(source)
        try:
            archive.addfile(_member(name, size, epoch), copied)
        except OSError as error:  # tarfile's "unexpected end of data": it shrank
            raise InputError([Problem("--layer", f"{layer} changed while it was copied ({error})")]) from None
    if copied.diff_id() != diff_id:
        raise InputError([Problem("--layer", f"{layer} changed while it was copied; write the archive again")])


class _HashingReader:
    """A file read through, hashing what was read."""

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self._digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        chunk = self._source.read(min(size, CHUNK) if size >= 0 else CHUNK)
        self._digest.update(chunk)
        return chunk

    def diff_id(self) -> str:
        return "sha256:" + self._digest.hexdigest()
