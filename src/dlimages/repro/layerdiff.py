"""Why two builds of one Dockerfile gave two image IDs: the config fields and, inside each layer whose diff_id
differs, every file that differs and how (content, mode, owner, time, type, link target, only in one image).

`compare_images` asks the engine for both images (through the runner) and streams `docker save` of each through
`SaveFn`; layers are parsed as they pass, never extracted or held whole. Identical layers are skipped unread where
the archive names blobs by digest (Docker 25+); Docker 20.10's <id>/layer.tar names say nothing of the diff_id, so
there each layer is hashed and parsed in one pass and only the changed ones are kept.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import re
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any, Protocol

from dlimages.core.runner import DEFAULT, Runner

# Yields `docker save REF` as a stream: an OCI layout (Docker 25+) or the older <id>/layer.tar one.
SaveFn = Callable[[str], AbstractContextManager[IO[bytes]]]

CHUNK = 1 << 20  # read size for archives, layers and file contents: few Python calls per GB, little memory
# tarfile's stream buffer: it copies what is left of the buffer on every read (each header of a small file),
# so a large one costs more than it saves; 32 KiB read a 400 MB layer of 20000 files fastest.
TAR_BUFFER = 1 << 15
STEP_CHARS = 100
VALUE_CHARS = 100
SAVE_EXIT_WAIT_S = 30.0

# The vocabulary of FileDifference.what, in the order it is reported.
WHAT = ("only in first", "only in second", "type", "content", "size", "mode", "owner", "time", "link", "xattrs")

_JSON_MAX = 4 << 20  # configs, manifests and indexes are kilobytes; a larger member is a layer
_HEAD = 512  # one tar block: enough to tell JSON, gzip, zstd and an empty tar apart
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})")
_XATTR_PREFIXES = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")
_USER_MAPS = frozenset({"Labels", "ExposedPorts", "Volumes"})  # keys are user data: shown as ["key"]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CompareError(Exception):
    """An image could not be compared: it does not exist, or `docker save` failed or wrote something unreadable."""


# ---------------------------------------------------------------------------------------------------------------
# What a comparison finds.
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileState:
    """One entry of a layer tar. Whiteouts (`.wh.*`) are files named so, reported with their path as is."""

    kind: str  # "file", "dir", "symlink", "hardlink", "char", "block", "fifo"
    mode: int  # permission bits, e.g. 0o644
    uid: int
    gid: int
    mtime: int  # whole seconds since the epoch
    size: int
    sha256: str = ""  # regular files: digest of the content
    link: str = ""  # symlink target as written; hardlink target as an absolute path in the image
    xattrs: tuple[tuple[str, str], ...] = ()  # (name, value) from PAX records, e.g. security.capability
    mtime_nsec: int = 0  # the sub-second part PAX can carry (Docker's own layers truncate to seconds)
    uname: str = ""
    gname: str = ""


@dataclass(frozen=True)
class FileDifference:
    """One path whose entry differs between the two versions of a layer, and in what (a subset of `WHAT`)."""

    path: str
    what: tuple[str, ...]
    first: FileState | None
    second: FileState | None

    def describe(self) -> str:
        """One line, e.g. `/etc/built-at: content (sha256 3f2a91c0..≠9b1c04de..), time (... ≠ ...)`."""
        a, b = self.first, self.second
        if a is None or b is None:
            only = a or b
            assert only is not None
            return f"{self.path}: {self.what[0]} ({_summary(only)})"
        return f"{self.path}: " + ", ".join(_detail(what, a, b) for what in self.what)


@dataclass(frozen=True)
class LayerDifference:
    """A layer whose diff_id differs at the same index, with the step that made it and its differing files."""

    index: int  # position in rootfs.diff_ids
    step: str  # the history entry's created_by for this layer, shortened
    first: str | None  # diff_id; None when the first image has fewer layers
    second: str | None
    files: tuple[FileDifference, ...]  # sorted by path
    note: str = ""  # why the diff_ids differ when no file does (entry order, header details)


@dataclass(frozen=True)
class ImageComparison:
    """Two images compared: config fields outside rootfs, and every layer that differs."""

    first: str  # image IDs
    second: str
    config: tuple[str, ...]  # e.g. 'created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z'
    layers: tuple[LayerDifference, ...]

    @property
    def identical(self) -> bool:
        return self.first == self.second

    def format(self, max_files_per_layer: int = 50) -> str:
        """The human report: both IDs, then "identical" or each config difference and each differing layer."""
        lines = [f"first:  {self.first}", f"second: {self.second}"]
        if self.identical:
            return "\n".join([*lines, "identical"])
        if self.config:
            lines.append(f"config: {_count(len(self.config), 'difference')}")
            lines += [f"  {line}" for line in self.config]
        for layer in self.layers:
            lines.append(f"layer {layer.index}: {layer.step or '(no history entry)'}")
            lines.append(f"  first:  {layer.first or '(no such layer)'}")
            lines.append(f"  second: {layer.second or '(no such layer)'}")
            if layer.note:
                lines.append(f"  {layer.note}")
            shown = layer.files[:max_files_per_layer]
            lines += [f"  {file.describe()}" for file in shown]
            if len(layer.files) > len(shown):
                lines.append(f"  ... and {len(layer.files) - len(shown)} more")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Reading `docker save` archives as a stream.
# ---------------------------------------------------------------------------------------------------------------


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
    """`docker save REF` as a binary stream. Leaving the block early stops docker; when docker fails, the error
    (raised on leaving the block) names the ref and docker's last stderr line."""
    # The one process started outside runner.py: Runner captures output as text in memory, and an image is
    # gigabytes of tar that must be read as it arrives and cut off once the wanted layers have passed.
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: stderr cannot fill up and stall docker
        try:
            proc = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, stderr=err)
        except OSError as error:
            raise CompareError(f"cannot run docker save {ref}: {error}") from error
        with proc:
            assert proc.stdout is not None
            try:
                yield proc.stdout
            except Exception as error:
                # A reader that failed at the end of the stream (nothing, or a cut archive) failed because docker
                # did: its message is the one to show. One still mid-stream failed on its own.
                at_end = proc.poll() is not None or not proc.stdout.read(1)
                code = _stop(proc, wait=at_end)
                if at_end and code not in (0, None):
                    raise CompareError(f"docker save {ref} failed (exit {code}): {_last_line(err)}") from error
                raise
            except BaseException:
                _stop(proc, wait=False)
                raise
            # The reader has what it needs (checked by digest): whatever docker still had to write is not needed.
            _stop(proc, wait=False)


def _stop(proc: subprocess.Popen[bytes], *, wait: bool) -> int | None:
    """The exit code of a docker that ended by itself; None for one that was still writing and was stopped."""
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=SAVE_EXIT_WAIT_S)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        return None
    return proc.returncode


def _last_line(err: IO[bytes]) -> str:
    err.seek(0)
    lines = [line.strip() for line in err.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _read_saved(image: _Image, wanted: set[str], save: SaveFn) -> _Saved:
    with save(image.ref) as stream:
        try:
            return _read_archive(stream, image, wanted)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
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

    def readinto(self, buffer: Any, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


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
    with tarfile.open(fileobj=stream, mode="r|", bufsize=TAR_BUFFER) as outer:
        for member in _entries(outer):
            source = outer.extractfile(member) if member.isreg() else None
            if source is None:
                continue  # directories; a layer.tar linked to one already read
            name = member.name.removeprefix("./")
            head = source.read(_HEAD)
            blob = _BLOB.fullmatch(name)
            if blob and blob.group(1) in wanted_hex and not head.startswith(_GZIP):
                layers.update(_layer_from(source, head, wanted, named=name))
            elif head.startswith(_GZIP) or name.endswith("/layer.tar"):
                # A compressed blob is named by its compressed digest, a 20.10 layer.tar by a v1 ID: only the
                # digest of the tar itself says which layer it is.
                layers.update(_layer_from(source, head, wanted))
            elif head.startswith(_ZSTD):
                unreadable += 1
            elif member.size <= _JSON_MAX and head.lstrip()[:1] in (b"{", b"["):
                data = head + source.read()
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


def _layer_from(source: IO[bytes], head: bytes, wanted: set[str], *, named: str = "") -> dict[str, _Layer]:
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
    first = _read_exactly(reader, tarfile.BLOCKSIZE)
    if not first.strip(b"\0"):
        return _Layer({}, ())  # an empty tar is all zeros, which tarfile refuses to open
    files: dict[str, FileState] = {}
    order: list[str] = []
    with tarfile.open(fileobj=_Reader(reader, first), mode="r|", bufsize=TAR_BUFFER) as tar:
        for info in _entries(tar):
            path = image_path(info.name)
            files[path] = _state(tar, info)  # a later entry of the same path replaces the earlier one
            order.append(path)
    return _Layer(files, tuple(order))


def _entries(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members of a stream-mode tar, one by one, each header forgotten once the next is read: tarfile keeps
    them all in `members` (undeclared in its stubs), and a layer can hold a million files."""
    while (info := tar.next()) is not None:
        members = getattr(tar, "members", None)
        if isinstance(members, list):
            members.clear()
        yield info


def _read_exactly(reader: _Readable, size: int) -> bytes:
    """`size` bytes, fewer only at the end: a read may return less than asked."""
    data = b""
    while len(data) < size and (more := reader.read(size - len(data))):
        data += more
    return data


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


# ---------------------------------------------------------------------------------------------------------------
# Comparing two images.
# ---------------------------------------------------------------------------------------------------------------


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


def shorten_step(created_by: str, limit: int = STEP_CHARS) -> str:
    """A history entry made short enough for one line: the classic builder's shell prefix and BuildKit's
    trailing marker dropped, whitespace collapsed, cut at `limit` characters."""
    text = " ".join(created_by.split())
    text = re.sub(r"^/bin/sh -c #\(nop\)\s*", "", text)
    text = text.removesuffix(" # buildkit")
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def file_changes(a: FileState, b: FileState) -> tuple[str, ...]:
    """What differs between two entries of one path, in `WHAT` order (content and link only for the same type)."""
    same_kind = a.kind == b.kind
    checks = {
        "type": not same_kind,
        "content": same_kind and a.sha256 != b.sha256,
        "size": same_kind and a.size != b.size,
        "mode": a.mode != b.mode,
        "owner": (a.uid, a.gid, a.uname, a.gname) != (b.uid, b.gid, b.uname, b.gname),
        "time": (a.mtime, a.mtime_nsec) != (b.mtime, b.mtime_nsec),
        "link": same_kind and a.link != b.link,
        "xattrs": a.xattrs != b.xattrs,
    }
    return tuple(what for what in WHAT if checks.get(what))


def compare_configs(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[str, ...]:
    """Every differing leaf of two image configs outside rootfs (which the layer comparison covers), as
    `path: first ≠ second`, e.g. `history[3].created: ...` or `config.Labels["x"]: a ≠ b`."""
    found: list[str] = []
    keys = sorted((first.keys() | second.keys()) - {"rootfs"})
    for key in keys:
        _walk(_child("", key, in_user_map=False), first.get(key, _ABSENT), second.get(key, _ABSENT), key, found)
    return tuple(found)


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT: Any = _Absent()


def _walk(path: str, a: Any, b: Any, key: str, found: list[str]) -> None:
    if a == b and type(a) is type(b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for child in sorted(a.keys() | b.keys()):
            _walk(_child(path, child, key in _USER_MAPS), a.get(child, _ABSENT), b.get(child, _ABSENT), child, found)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            item_a = a[i] if i < len(a) else _ABSENT
            item_b = b[i] if i < len(b) else _ABSENT
            _walk(f"{path}[{i}]", item_a, item_b, key, found)
    else:
        found.append(f"{path}: {_show(a)} ≠ {_show(b)}")


def _child(path: str, key: str, in_user_map: bool) -> str:
    if in_user_map or not _IDENTIFIER.fullmatch(key):
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def compare_images(first: str, second: str, *, save: SaveFn = docker_save, runner: Runner = DEFAULT) -> ImageComparison:
    """Compare two local images; raises CompareError when one does not exist or cannot be read.

    Same image ID: identical, nothing saved. Otherwise both are streamed through `save` (default `docker_save`)
    once each, for their exact config and the layers whose diff_id differs at the same index.
    """
    a, b = _inspect(first, runner), _inspect(second, runner)
    if a.id == b.id:
        return ImageComparison(a.id, b.id, (), ())
    count = max(len(a.diff_ids), len(b.diff_ids))
    indices = [i for i in range(count) if _at(a.diff_ids, i) != _at(b.diff_ids, i)]
    saved_a = _read_saved(a, {d for i in indices if (d := _at(a.diff_ids, i))}, save)
    saved_b = _read_saved(b, {d for i in indices if (d := _at(b.diff_ids, i))}, save)
    steps_a, steps_b = _layer_steps(saved_a.config), _layer_steps(saved_b.config)
    layers = []
    for i in indices:
        id_a, id_b = _at(a.diff_ids, i), _at(b.diff_ids, i)
        files, note = _compare_layers(
            saved_a.layers[id_a] if id_a else None,
            saved_b.layers[id_b] if id_b else None,
        )
        step = _at(steps_a, i) or _at(steps_b, i) or ""
        layers.append(LayerDifference(i, shorten_step(step), id_a, id_b, files, note))
    config = compare_configs(saved_a.config, saved_b.config)
    if not config and not layers and saved_a.raw_config != saved_b.raw_config:
        config = ("the configs hold the same values, serialized differently (key order, spacing or number format)",)
    return ImageComparison(a.id, b.id, config, tuple(layers))


# ---------------------------------------------------------------------------------------------------------------
# Words.
# ---------------------------------------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _summary(state: FileState) -> str:
    if state.kind == "file":
        return f"file, {_count(state.size, 'byte')}"
    if state.link:
        return f"{state.kind} -> {state.link}"
    return state.kind


def _detail(what: str, a: FileState, b: FileState) -> str:
    pairs: dict[str, tuple[str, str]] = {
        "type": (a.kind, b.kind),
        "content": (f"sha256 {a.sha256[:8]}..", f"{b.sha256[:8]}.."),
        "size": (str(a.size), str(b.size)),
        "mode": (f"{a.mode:04o}", f"{b.mode:04o}"),
        "owner": (_owner(a), _owner(b)),
        "time": (format_time(a.mtime, a.mtime_nsec), format_time(b.mtime, b.mtime_nsec)),
        "link": (a.link, b.link),
    }
    if what == "xattrs":
        names = sorted({name for name, _ in set(a.xattrs) ^ set(b.xattrs)})
        return f"xattrs ({', '.join(names)})"
    first, second = pairs[what]
    joint = "≠" if what == "content" else " ≠ "
    return f"{what} ({first}{joint}{second})"


def _owner(state: FileState) -> str:
    ids = f"{state.uid}:{state.gid}"
    return f"{state.uname or state.uid}:{state.gname or state.gid} ({ids})" if state.uname or state.gname else ids


def format_time(seconds: int, nsec: int = 0) -> str:
    """UTC in ISO 8601, e.g. 2026-11-30T13:02:11Z (with the fraction when there is one)."""
    try:
        text = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{seconds}.{nsec:09d} s" if nsec else f"{seconds} s"
    return f"{text}.{f'{nsec:09d}'.rstrip('0')}Z" if nsec else f"{text}Z"
