"""The offline base as a docker-archive (what `docker save` writes and `docker load` reads) whose every byte follows
from the layer tarball, the tag and SOURCE_DATE_EPOCH, so its image ID is the same on every machine.

`docker import` stamps the image config with the time of the import; here `created` is the epoch and the JSON is
canonical, so the image ID (the sha256 of the config) depends on the layer alone. Example::

    python3 -m dlimages.building.imagearchive --layer .work/base/debian12-minbase.tar \\
        --out .work/base/debian12-minbase.docker.tar --tag dlimages/base:debian12 --epoch 1747699200
    # prints sha256:...; `docker load -i` of the archive gives that image ID (classic image store)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Sequence
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
_DIGITS = re.compile("[0-9]{1,12}")  # ASCII only: int() also takes other scripts' digits, '1_000' and spaces


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


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_diff_id(layer: Path) -> str:
    """The layer's diff_id: the sha256 of the uncompressed tarball, read in chunks."""
    digest = hashlib.sha256()
    with layer.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def parse_epoch(text: str) -> int | None:
    """SOURCE_DATE_EPOCH as given on a command line, or None when it is not whole seconds in ASCII digits."""
    return int(text) if _DIGITS.fullmatch(text) else None


def tag_problem(tag: str) -> str | None:
    """What is wrong with the name the archive gives its image, or None. `docker load` takes repository:tag only."""
    return tagged_ref_problem(
        tag,
        digest_why="an archive names its image by repository:tag",
        untagged_why="docker load refuses a repository without one",
    )


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
    problem = tag_problem(tag)
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
    image_id = sha256_digest(config_bytes)
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
                        archive.addfile(_member(name, len(small[name]), epoch), _Reader(small[name]))
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


class _Reader:
    """Bytes as something tarfile reads from."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk = self._data[self._at : end]
        self._at += len(chunk)
        return chunk


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


# ---------------------------------------------------------------------------------------------
# Command line: used by scripts/make-base.sh.
# ---------------------------------------------------------------------------------------------

USAGE_ERROR = 2
WRITE_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m dlimages.building.imagearchive",
        description="Write a reproducible docker-archive of one layer tarball and print its image ID. "
        "Exit 0 written, 1 could not write, 2 bad input (nothing written).",
    )
    parser.add_argument("--layer", required=True, metavar="TAR", help="the uncompressed layer tarball (mmdebstrap's)")
    parser.add_argument("--out", required=True, metavar="FILE", help="where the archive goes (its folder must exist)")
    parser.add_argument("--tag", required=True, metavar="REPO:TAG", help="the name docker load gives the image")
    parser.add_argument("--epoch", required=True, metavar="SECONDS", help="SOURCE_DATE_EPOCH: `created` and mtimes")
    parser.add_argument(
        "--created-by",
        default=DEFAULT_CREATED_BY,
        metavar="TEXT",
        help=f"how the layer was made, for `docker history` (default {DEFAULT_CREATED_BY!r}); no host paths",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Bad flags are exit 2 (argparse's usage errors included) with every problem named; nothing is written."""
    args = build_parser().parse_args(argv)
    epoch = parse_epoch(args.epoch)
    problems = [] if epoch is not None else [Problem("--epoch", f"{args.epoch[:40]!r} is not a number", EPOCH_ALLOWED)]
    layer, out, config = Path(args.layer), Path(args.out), ImageConfig(created_by=args.created_by)
    try:
        problems += archive_problems(layer, out, tag=args.tag, epoch=epoch or 0, config=config)
        if problems:
            raise InputError(problems)
        assert epoch is not None
        image_id = write_docker_archive(layer, out, tag=args.tag, epoch=epoch, config=config)
    except InputError as error:
        print(error.report(), file=sys.stderr)
        return USAGE_ERROR
    except OSError as error:
        print(f"error: cannot write {out}: {error.strerror or error}", file=sys.stderr)
        return WRITE_ERROR
    print(image_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
