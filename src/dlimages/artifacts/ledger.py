"""The build ledger (.work/builds.json): the latest build result of each cell, the link from `invoke build` to
`invoke test` and `invoke push`, so that what is tested and pushed, and the build report, name their cell."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.model.cells import Cell

LEDGER_FILE = Path(".work/builds.json")


class Built(Protocol):
    """A build's result as the ledger keeps it (building.builder's BuildResult)."""

    @property
    def cell(self) -> Cell: ...
    @property
    def ok(self) -> bool: ...
    @property
    def image_id(self) -> str | None: ...
    @property
    def local_id(self) -> str | None: ...


@dataclass(frozen=True)
class Entry:
    """One cell's latest build: its refs (the immutable tag first), and whether it succeeded."""

    cell: str  # the cell's slug, e.g. cuda12.1-torch2.1.2-py3.11-runtime
    refs: tuple[str, ...]
    ok: bool
    image_id: str | None = None  # the config digest
    local_id: str | None = None  # what the engine names it (the manifest digest on the containerd store)

    @classmethod
    def of(cls, result: Built) -> Entry:
        return cls(result.cell.slug, result.cell.refs, result.ok, result.image_id, result.local_id)


@dataclass(frozen=True)
class Ledger:
    root: Path

    @property
    def path(self) -> Path:
        return self.root / LEDGER_FILE

    def entries(self) -> list[Entry]:
        """Every recorded cell in build order; none before the first build. InputError when the file is damaged."""
        if not self.path.is_file():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [_entry(item) for item in data]
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as error:
            raise InputError(
                [Problem(str(LEDGER_FILE), f"is not a build ledger ({error})", "delete it and build again")]
            ) from None

    def record(self, results: Iterable[Built]) -> None:
        """Keep each built cell's latest result (a rebuild replaces the cell's entry, others stay)."""
        known = {entry.cell: entry for entry in self.entries()}
        known.update({entry.cell: entry for entry in map(Entry.of, results)})
        write_atomic(self.path, json.dumps([asdict(entry) for entry in known.values()], indent=2) + "\n")

    def built_refs(self, *, every_tag: bool = False) -> list[str]:
        """The immutable ref (or every ref) of each cell whose latest build succeeded."""
        return [ref for entry in self.entries() if entry.ok for ref in (entry.refs if every_tag else entry.refs[:1])]

    def moving_refs(self) -> set[str]:
        """The refs that move on purpose (a release tag such as v1.0, an alias): every ref of an entry but its first.
        Push may replace what a registry has under them; every other tag is immutable there."""
        return {ref for entry in self.entries() for ref in entry.refs[1:]}

    def configs(self) -> dict[str, str]:
        """The config digest of each image the engine named when it was built: a manifest names one config, so the
        containerd store's images need no `docker save` to tell it (core.imagestore.config_digest)."""
        return {e.local_id: e.image_id for e in self.entries() if e.ok and e.local_id and e.image_id}

    def cells_by_ref(self) -> dict[str, str]:
        """Which cell each recorded ref belongs to (its latest successful build)."""
        return {ref: entry.cell for entry in self.entries() if entry.ok for ref in entry.refs}


def _entry(item: Any) -> Entry:
    refs = item["refs"]
    if not isinstance(item["cell"], str) or not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise ValueError(f"unexpected entry {item!r:.80}")
    return Entry(item["cell"], tuple(refs), bool(item["ok"]), item.get("image_id"), item.get("local_id"))
