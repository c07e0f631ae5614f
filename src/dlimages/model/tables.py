"""Plain-text views of cells and exclusions for people (JSON views come from Cell.as_json)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dlimages.model.cells import Cell, Exclusion


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def cells_table(cells: Sequence[Cell], locks: Mapping[str, str]) -> str:
    """One row per cell, with what each build needs from outside (`Cell.needs`: hub+pypi, base+pytorch-index+pypi,
    ...) and whether it is locked (`locks`: slug -> lock status, artifacts/pythonlock)."""
    headers = ["framework", "version", "cuda", "cudnn", "python", "os", "flavor", "cuda from", "min driver"]
    headers += ["needs", "lock", "tags"]
    rows = [
        [
            c.framework,
            c.framework_version,
            c.cuda,
            c.cudnn,
            c.python,
            c.os,
            c.flavor,
            c.cuda_source,
            c.min_driver,
            "+".join(c.needs),
            locks.get(c.slug, "unlocked"),
            ", ".join(c.tags),
        ]
        for c in cells
    ]
    return format_table(headers, rows)


def exclusions_text(excluded: Sequence[Exclusion]) -> str:
    lines = []
    for exclusion in excluded:
        lines.append(f"{exclusion.candidate.describe()}: excluded")
        lines += [f"    - {reason}" for reason in exclusion.reasons]
    return "\n".join(lines)
