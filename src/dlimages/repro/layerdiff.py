"""Why two builds of one Dockerfile gave two image IDs: the config fields and, inside each layer whose diff_id
differs, every file that differs and how (content, mode, owner, time, type, link target, only in one image).

`compare_images` asks the engine for both images (through the runner) and streams `docker save` of each through
`SaveFn` (core.imagestream's by default), read by core.imagestream's tar reader; layers are parsed as they pass,
never extracted or held whole. Identical layers are skipped unread where the archive names blobs by digest (Docker
25+); Docker 20.10's <id>/layer.tar names say nothing of the diff_id, so there each layer is hashed and parsed in
one pass and only the changed ones are kept. What a comparison finds, and how it reads, is comparison.py's.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import itertools
import json
import math
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any, Protocol

from dlimages.core.imagestream import CHUNK, ArchiveError, TarStream
from dlimages.core.imagestream import docker_save as save_stream
from dlimages.core.runner import DEFAULT, Runner
from dlimages.repro.comparison import (
    FileDifference,
    FileState,
    ImageComparison,
    LayerDifference,
    compare_configs,
    file_changes,
    shorten_step,
)

# Yields `docker save REF` as a stream: an OCI layout (Docker 25+) or the older <id>/layer.tar one.
SaveFn = Callable[[str], AbstractContextManager[IO[bytes]]]

# tarfile's stream buffer: it copies what is left of the buffer on every read (each header of a small file),
# so a large one costs more than it saves; 32 KiB read a 400 MB layer of 20000 files fastest.
TAR_BUFFER = 1 << 15

_JSON_MAX = 4 << 20  # configs, manifests and indexes are kilobytes; a larger member is a layer
_HEAD = 512  # one tar block: enough to tell JSON, gzip, zstd and an empty tar apart
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})")
_XATTR_PREFIXES = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")


class CompareError(Exception):
    """An image could not be compared: it does not exist, or `docker save` failed or wrote something unreadable."""


# --- reading the saved images: the config and the changed layers, parsed as they pass ---------------------------------


@dataclass(frozen=True)
class _Image:
    ref: str
    id: str
    diff_ids: tuple[str, ...]


@dataclass(frozen=True)
class _Layer:
    files: Mapping[str, FileState]
    order: tuple[str, ...]  # paths as the tar lists them


@dataclass(frozen=True)
class _Saved:
    config: Mapping[str, Any]
    raw_config: bytes
    layers: Mapping[str, _Layer]  # diff_id -> parsed layer, only the ones asked for


@contextlib.contextmanager
def docker_save(ref: str) -> Iterator[IO[bytes]]:
    """`docker save REF` as a binary stream (core.imagestream.docker_save). Leaving the block early stops docker; when
    docker fails, the error (raised on leaving the block) names the ref and docker's last stderr line."""
    stream, finish = save_stream(ref)
    at_end = False
    try:
        yield stream
    except Exception:
        # A reader that failed at the end of the stream (nothing, or a cut archive) failed because docker did: its
        # message is the one to show. One still mid-stream failed on its own.
        with contextlib.suppress(Exception):
            at_end = not stream.read(1)
        raise
    finally:
        # The reader has what it needs (checked by digest), or failed: whatever docker still had to write is not
        # needed, and docker stops once its stream is closed.
        stream.close()
        done = finish()
        if at_end and not done.ok:
            raise CompareError(f"docker save {ref} failed (exit {done.code}): {done.last_line}")


def _read_saved(image: _Image, wanted: set[str], save: SaveFn) -> _Saved:
    with save(image.ref) as stream:
        try:
            return _read_archive(stream, image, wanted)
        except (ArchiveError, tarfile.TarError, EOFError, OSError, zlib.error) as error:
            raise CompareError(f"cannot read docker save of {image.ref}: {error}") from error


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Reader(io.RawIOBase):
    """Passes on what it reads from `source`, after `head` (bytes read earlier to sniff the format)."""

    def __init__(self, source: _Readable, head: bytes = b"") -> None:
        super().__init__()
        self._source = source
        self._head = head

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        if not self._head:
            return self._source.read(size)
        data, self._head = (self._head, b"") if size < 0 else (self._head[:size], self._head[size:])
        return data


class _Tee(_Reader):
    """A reader that hashes everything it passes on: the digest of a layer tar is its diff_id."""

    def __init__(self, source: _Readable, head: bytes = b"") -> None:
        super().__init__(source, head)
        self._sha256 = hashlib.sha256()

    def read(self, size: int = -1, /) -> bytes:
        data = super().read(size)
        self._sha256.update(data)
        return data

    def digest(self) -> str:
        """Reads what is left, then the digest of everything, as "sha256:<hex>"."""
        while self.read(CHUNK):
            pass
        return "sha256:" + self._sha256.hexdigest()


def _read_archive(stream: IO[bytes], image: _Image, wanted: set[str]) -> _Saved:
    """The config of `image` and the layers in `wanted` (diff_ids) from a `docker save` stream, read once, front
    to back: the OCI layout of Docker 25+ (blobs/sha256/<hex>) and the older <id>/layer.tar layout alike, members
    in any order. A layer is known by the digest of its uncompressed tar, computed while it is parsed; an
    uncompressed blob named by a digest not wanted is skipped unparsed. Stops once everything asked for is read."""
    config_hex = image.id.removeprefix("sha256:")
    wanted_hex = {diff_id.removeprefix("sha256:") for diff_id in wanted}
    small: dict[str, bytes] = {}  # JSON members by name: the config, manifest.json, index.json
    config: bytes | None = None
    layers: dict[str, _Layer] = {}
    unreadable = 0
    archive = TarStream(stream)
    for name, size, is_file in archive.members():
        if not is_file:
            continue  # directories; a layer.tar linked to one already read
        name = name.removeprefix("./")
        head = archive.read(_HEAD)
        blob = _BLOB.fullmatch(name)
        if blob and blob.group(1) in wanted_hex and not head.startswith(_GZIP):
            layers.update(_layer_from(archive, head, wanted, named=name))
        elif head.startswith(_GZIP) or name.endswith("/layer.tar"):
            # A compressed blob is named by its compressed digest, a 20.10 layer.tar by a v1 ID: only the digest
            # of the tar itself says which layer it is.
            layers.update(_layer_from(archive, head, wanted))
        elif head.startswith(_ZSTD):
            unreadable += 1
        elif size <= _JSON_MAX and head.lstrip()[:1] in (b"{", b"["):
            data = head + archive.read()
            small[name] = data
            if hashlib.sha256(data).hexdigest() == config_hex:
                config = data
        if config is not None and wanted <= layers.keys():
            break
    config = config if config is not None else _config_from_manifest(small)
    if config is None:
        raise CompareError(
            f"docker save of {image.ref} holds no config {image.id}: was {image.ref} re-tagged meanwhile?"
        )
    missing = sorted(wanted - layers.keys())
    if missing:
        hint = f" ({unreadable} zstd-compressed blobs could not be read)" if unreadable else ""
        raise CompareError(f"docker save of {image.ref} holds no layer {', '.join(missing)}{hint}")
    parsed = json.loads(config)
    if not isinstance(parsed, dict):
        raise CompareError(f"docker save of {image.ref}: the image config is not a JSON object")
    return _Saved(parsed, config, layers)


def _config_from_manifest(small: Mapping[str, bytes]) -> bytes | None:
    """The config manifest.json names: for an image store whose image IDs are manifest digests (containerd)."""
    try:
        manifest = json.loads(small.get("manifest.json", b"[]"))
        return small.get(str(manifest[0]["Config"]))
    except (ValueError, LookupError, TypeError):
        return None


def _layer_from(source: _Readable, head: bytes, wanted: set[str], *, named: str = "") -> dict[str, _Layer]:
    """{diff_id: layer} for a member that may be a wanted layer, {} for one that is not. A member `named` by a
    wanted digest must be that layer: a tar that does not parse or hash as named is an error, not a skip."""
    compressed = head.startswith(_GZIP)
    tee = _Tee(gzip.GzipFile(fileobj=_Reader(source, head), mode="rb")) if compressed else _Tee(source, head)
    layer: _Layer | None = None
    problem = ""
    try:
        layer = _layer_entries(tee)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        problem = f"not a readable tar ({error})"
    try:
        diff_id = tee.digest()
    except (EOFError, OSError, zlib.error) as error:
        diff_id, problem = "", f"not readable ({error})"
    if named and "sha256:" + named.rsplit("/", 1)[-1] != diff_id:
        raise CompareError(f"{named} does not hold the layer its name says: {problem or 'its digest differs'}")
    if diff_id not in wanted:
        return {}
    if layer is None:
        raise CompareError(f"layer {diff_id} is {problem}")
    return {diff_id: layer}


def _layer_entries(reader: _Readable) -> _Layer:
    """Every entry of a layer tar, read as a stream; file contents hashed chunk by chunk, never kept."""
    first = reader.read(tarfile.BLOCKSIZE)  # whole: the sniffed head is one block, and GzipFile reads till it has it
    if not first.strip(b"\0"):
        return _Layer({}, ())  # an empty tar is all zeros, which tarfile refuses to open
    files: dict[str, FileState] = {}
    order: list[str] = []
    with tarfile.open(fileobj=_Reader(reader, first), mode="r|", bufsize=TAR_BUFFER) as tar:
        while (info := tar.next()) is not None:
            # tarfile keeps every header in `members` (undeclared in its stubs): a layer can hold a million files
            members = getattr(tar, "members", None)
            if isinstance(members, list):
                members.clear()
            path = image_path(info.name)
            files[path] = _state(tar, info)  # a later entry of the same path replaces the earlier one
            order.append(path)
    return _Layer(files, tuple(order))


def image_path(name: str) -> str:
    """A tar member name as an absolute path in the image: `./etc/x/` -> `/etc/x`."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    return "/" + "/".join(parts)


def _state(tar: tarfile.TarFile, info: tarfile.TarInfo) -> FileState:
    mtime, nsec = _mtime(info)
    digest = ""
    if info.isreg():
        content = tar.extractfile(info)
        assert content is not None
        sha = hashlib.sha256()
        while chunk := content.read(CHUNK):
            sha.update(chunk)
        digest = sha.hexdigest()
    link = image_path(info.linkname) if info.islnk() else info.linkname if info.issym() else ""
    xattrs = tuple(
        sorted(
            (key.split(".xattr.", 1)[1], value)
            for key, value in info.pax_headers.items()
            if key.startswith(_XATTR_PREFIXES)
        )
    )
    return FileState(
        kind=_kind(info),
        mode=info.mode & 0o7777,
        uid=info.uid,
        gid=info.gid,
        mtime=mtime,
        size=info.size if info.isreg() else 0,
        sha256=digest,
        link=link,
        xattrs=xattrs,
        mtime_nsec=nsec,
        uname=info.uname,
        gname=info.gname,
    )


def _kind(info: tarfile.TarInfo) -> str:
    kinds = (
        (info.isreg(), "file"),
        (info.isdir(), "dir"),
        (info.issym(), "symlink"),
        (info.islnk(), "hardlink"),
        (info.ischr(), "char"),
        (info.isblk(), "block"),
        (info.isfifo(), "fifo"),
    )
    return next((kind for matches, kind in kinds if matches), f"tar type {info.type!r}")


def _mtime(info: tarfile.TarInfo) -> tuple[int, int]:
    """(seconds, nanoseconds): exact from a PAX mtime record (tarfile's float rounds), else the header's."""
    text = info.pax_headers.get("mtime", "")
    match = re.fullmatch(r"(-?)(\d+)(?:\.(\d+))?", text)
    if not match:
        return math.floor(info.mtime), 0
    sign, whole, fraction = match.groups()
    seconds, nsec = int(whole), int(((fraction or "") + "0" * 9)[:9])
    if sign and nsec:
        return -seconds - 1, 1_000_000_000 - nsec
    return (-seconds if sign else seconds), nsec


# --- comparing two images ---------------------------------------------------------------------------------------------


def _at(items: tuple[str, ...], index: int) -> str | None:
    return items[index] if index < len(items) else None


def _inspect(ref: str, runner: Runner) -> _Image:
    done = runner.docker("image", "inspect", ref)
    if not done.ok:
        raise CompareError(f"cannot compare {ref}: docker image inspect failed: {done.last_line}")
    try:
        info = json.loads(done.out)[0]
        layers = tuple(str(layer) for layer in info["RootFS"].get("Layers") or ())
        return _Image(ref, str(info["Id"]), layers)
    except (ValueError, LookupError, TypeError, AttributeError) as error:
        raise CompareError(f"cannot compare {ref}: docker image inspect printed no image: {error!r}") from error


def _layer_steps(config: Mapping[str, Any]) -> tuple[str, ...]:
    """created_by of each history entry that made a layer (the others are marked empty_layer), in layer order."""
    history = config.get("history") or []
    return tuple(
        str(entry.get("created_by") or "")
        for entry in history
        if isinstance(entry, dict) and not entry.get("empty_layer")
    )


def _compare_layers(first: _Layer | None, second: _Layer | None) -> tuple[tuple[FileDifference, ...], str]:
    """Every path whose entry differs, sorted; and a note when the tars differ though no entry does."""
    files_a = first.files if first else {}
    files_b = second.files if second else {}
    found = []
    for path in sorted(files_a.keys() | files_b.keys()):
        a, b = files_a.get(path), files_b.get(path)
        what = ("only in second",) if a is None else ("only in first",) if b is None else file_changes(a, b)
        if what:
            found.append(FileDifference(path, what, a, b))
    note = ""
    if not found and first and second:
        if first.order != second.order:
            note = "same files, in a different order in the layer tar"
        else:
            note = (
                "no entry differs in type, content, mode, owner, time, link or xattrs: the tars differ in header "
                "details not compared (other PAX records, device numbers, padding)"
            )
    return tuple(found), note


def compare_images(first: str, second: str, *, save: SaveFn = docker_save, runner: Runner = DEFAULT) -> ImageComparison:
    """Compare two local images; raises CompareError when one does not exist or cannot be read.

    Same image ID: identical, nothing saved. Otherwise both are streamed through `save` (default `docker_save`)
    once each, for their exact config and the layers whose diff_id differs at the same index.
    """
    a, b = _inspect(first, runner), _inspect(second, runner)
    if a.id == b.id:
        return ImageComparison(a.id, b.id, (), ())
    pairs = itertools.zip_longest(a.diff_ids, b.diff_ids)
    changed = [(i, id_a, id_b) for i, (id_a, id_b) in enumerate(pairs) if id_a != id_b]
    saved_a = _read_saved(a, {id_a for _, id_a, _ in changed if id_a}, save)
    saved_b = _read_saved(b, {id_b for _, _, id_b in changed if id_b}, save)
    steps_a, steps_b = _layer_steps(saved_a.config), _layer_steps(saved_b.config)
    layers = []
    for i, id_a, id_b in changed:
        files, note = _compare_layers(saved_a.layers[id_a] if id_a else None, saved_b.layers[id_b] if id_b else None)
        step = _at(steps_a, i) or _at(steps_b, i) or ""
        layers.append(LayerDifference(i, shorten_step(step), id_a, id_b, files, note))
    config = compare_configs(saved_a.config, saved_b.config)
    if not config and not layers and saved_a.raw_config != saved_b.raw_config:
        config = ("the configs hold the same values, serialized differently (key order, spacing or number format)",)
    return ImageComparison(a.id, b.id, config, tuple(layers))
