"""What comparing two images finds and how it reads: each file's state and how two states differ, the differing
layers and config fields, and the words of the report. Pure: layerdiff.py reads the images and compares them."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

STEP_CHARS = 100
VALUE_CHARS = 100

# The vocabulary of FileDifference.what, in the order it is reported.
WHAT = ("only in first", "only in second", "type", "content", "size", "mode", "owner", "time", "link", "xattrs")

_USER_MAPS = frozenset({"Labels", "ExposedPorts", "Volumes"})  # keys are user data: shown as ["key"]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

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
# Comparing files and configs.
# ---------------------------------------------------------------------------------------------------------------


def shorten_step(created_by: str, limit: int = STEP_CHARS) -> str:
    """A history entry made short enough for one line: the classic builder's shell prefix and BuildKit's
    trailing marker dropped, whitespace collapsed, cut at `limit` characters."""
    text = " ".join(created_by.split())
    text = re.sub(r"^/bin/sh -c #\(nop\)\s*", "", text)
    text = text.removesuffix(" # buildkit")
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


_ABSENT: Any = object()  # a key or item one side lacks: shown as "(absent)"


def _walk(path: str, a: Any, b: Any, key: str, found: list[str]) -> None:
    if a == b and type(a) is type(b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for child in sorted(a.keys() | b.keys()):
            _walk(_child(path, child, key in _USER_MAPS), a.get(child, _ABSENT), b.get(child, _ABSENT), child, found)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (item_a, item_b) in enumerate(itertools.zip_longest(a, b, fillvalue=_ABSENT)):
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
