"""Which pip and dpkg packages each cell's image gained, lost or moved between two sets of build reports
(`invoke package-diff`, the weekly rebuild's job summary).

The reports are read as untrusted input: only regular files (a FIFO, a device or a link is refused without being
opened), each at most MAX_FILE_BYTES, checked against the shape `invoke push --report` writes; every name and
version is escaped before it reaches Markdown. Every problem is an InputError naming the flag and the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import NotRegular, read_regular

KINDS = ("pip", "dpkg")
MAX_FILE_BYTES = 32 * 1024 * 1024  # a report of 100 images with 1,000 packages each is under 10 MB
MAX_FILES = 1000
# Every ASCII punctuation character but '.' and '-' (common in versions and harmless inside a line) can start
# Markdown or HTML: emphasis, links, autolinks, tables, entities. A backslash makes each a literal.
_MARKDOWN = re.compile(r"""([!"#$%&'()*+,/:;<=>?@\[\\\]^_`{|}~])""")
# Control characters and line breaks, and the bidirectional controls and zero-width marks that would let a name
# reorder or hide the text around it once rendered.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u061c\u200b-\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]")

Packages = dict[str, dict[str, str]]  # kind -> name -> version


@dataclass(frozen=True)
class PackageChange:
    kind: str  # "pip" or "dpkg"
    name: str
    before: str | None  # None: new in this build
    after: str | None  # None: gone from this build


@dataclass(frozen=True)
class ReportDiff:
    changed: dict[str, tuple[PackageChange, ...]]  # per cell (or ref, for an image built elsewhere)
    unchanged: tuple[str, ...]
    new: tuple[str, ...]  # only in this report
    missing: tuple[str, ...]  # only in the previous one: not rebuilt, or failed this time


def report_diff(before: Mapping[str, Packages], after: Mapping[str, Packages]) -> ReportDiff:
    """Which packages each cell gained, lost or changed version between two `load_reports` results."""
    changed: dict[str, tuple[PackageChange, ...]] = {}
    unchanged: list[str] = []
    for cell in sorted(set(before) & set(after)):
        old, new = before[cell], after[cell]
        found = tuple(
            PackageChange(kind, name, old[kind].get(name), new[kind].get(name))
            for kind in KINDS
            for name in sorted(set(old[kind]) | set(new[kind]), key=str.lower)
            if old[kind].get(name) != new[kind].get(name)
        )
        if found:
            changed[cell] = found
        else:
            unchanged.append(cell)
    return ReportDiff(
        changed, tuple(unchanged), tuple(sorted(set(after) - set(before))), tuple(sorted(set(before) - set(after)))
    )


def escape(text: str) -> str:
    """`text` as literal Markdown on one line: punctuation backslashed, control characters, line breaks,
    bidirectional controls and zero-width marks shown as U+FFFD."""
    return _MARKDOWN.sub(r"\\\1", _CONTROL.sub("\ufffd", text))


def diff_markdown(diff: ReportDiff, *, compared: bool = True) -> str:
    """The summary as Markdown: one table per changed cell, then the cells without changes."""
    if not compared:
        return "## Package changes\n\nNo earlier build report to compare with: this run's reports are the baseline.\n"
    lines = ["## Package changes since the previous rebuild", ""]
    for cell, changes in diff.changed.items():
        lines += [f"### {escape(cell)}", "", "| kind | package | before | after |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {c.kind} | {escape(c.name)} | {escape(c.before) if c.before else '(new)'} | "
            f"{escape(c.after) if c.after else '(gone)'} |"
            for c in changes
        ]
        lines.append("")
    if not diff.changed:
        lines += ["No package changed.", ""]
    for label, cells in (("Unchanged", diff.unchanged), ("New", diff.new), ("Not rebuilt", diff.missing)):
        if cells:
            lines.append(f"{label} ({len(cells)}): {', '.join(map(escape, cells))}")
    return "\n".join(lines).rstrip() + "\n"


def load_reports(folder: str, flag: str, *, required: bool) -> dict[str, Packages]:
    """Each cell's (or, for an image built elsewhere, each ref's) packages from the build reports (*.json) under
    `folder`, searched without following links. A missing folder, or one without reports, gives nothing unless
    `required`. InputError naming `flag` for anything that is not a readable folder of build reports, and for a cell
    that two entries give different packages (the same packages twice count once)."""
    try:
        top = os.stat(folder) if folder else None
    except FileNotFoundError:
        top = None
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise InputError([Problem(flag, f"cannot read {folder!r}: {_reason(error)}")]) from None
    if top is not None and not stat.S_ISDIR(top.st_mode):
        raise InputError([Problem(flag, f"{folder!r} is not a folder", "the folder the build reports were put in")])
    paths = _report_files(Path(folder), flag) if top is not None else []
    if required and not paths:
        raise InputError([Problem(flag, f"no build report (*.json) under {folder!r}")])
    packages: dict[str, Packages] = {}
    source: dict[str, Path] = {}
    for path in paths:
        for number, entry in enumerate(_read_json(path, flag), start=1):
            where = f"{flag} {path}: entry {number}"
            key, found = _entry(entry, where)
            if key in packages and packages[key] != found:
                raise InputError(
                    [Problem(where, f"lists other packages for cell {key!r} than {source[key]}", "one report per cell")]
                )
            packages[key], source[key] = found, source.get(key, path)
    return packages


def _report_files(folder: Path, flag: str) -> list[Path]:
    found: list[Path] = []

    def refuse(error: OSError) -> None:
        raise InputError([Problem(f"{flag} {error.filename}", f"cannot read it: {_reason(error)}")])

    for where, _, names in os.walk(folder, onerror=refuse):  # links to folders are not followed
        found += [Path(where, name) for name in names if name.endswith(".json")]
        if len(found) > MAX_FILES:
            raise InputError([Problem(flag, f"more than {MAX_FILES} *.json files under {str(folder)!r}")])
    return sorted(found)


def _read_json(path: Path, flag: str) -> Any:
    where = f"{flag} {path}"
    try:
        data = read_regular(path, MAX_FILE_BYTES, follow=False)
    except NotRegular:
        raise InputError([Problem(where, "is not a regular file (a link, FIFO or device is never read)")]) from None
    except OSError as error:
        raise InputError([Problem(where, f"cannot read it: {_reason(error)}")]) from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError([Problem(where, f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB: not a build report")])
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise InputError([Problem(where, f"is not JSON ({str(error)[:120]})")]) from None
    if not isinstance(parsed, list):
        raise InputError([Problem(where, "is not a build report", f"a JSON list of entries, as `{usage.PUSH}` writes")])
    return parsed


def _entry(entry: object, where: str) -> tuple[str, Packages]:
    """The key (cell, else ref) and the packages of one report entry; InputError unless it has the report's shape."""
    if not isinstance(entry, dict):
        raise InputError([Problem(where, "is not an object")])
    key = entry.get("cell") or entry.get("ref")
    if not isinstance(key, str) or not key:
        raise InputError([Problem(where, "has neither a cell nor a ref (text)")])
    image = entry.get("image")
    if not isinstance(image, dict):
        raise InputError([Problem(where, "has no image object (its manifest)")])
    return key, {kind: _table(image.get(kind), f"{where}: image.{kind}") for kind in KINDS}


def _table(value: object, where: str) -> dict[str, str]:
    if value is None:  # an image without Python records "pip": null
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError([Problem(where, "is not a table of package names to versions (text)")])
    return dict(value)


def _reason(error: OSError | ValueError) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error)
