"""The doctor's report for people: the node on one line, then RUNS / NO per image with how, its reasons and notes.

Laid out from `doctor.report`'s rows (the JSON `invoke doctor --json` prints), so the text and the JSON never differ
in what they say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from dlimages.model import toolkit
from dlimages.model.doctor import PATHS
from dlimages.model.gpunode import Gpu, Node


def describe_node(node: Node) -> str:
    """One line: where the facts come from, driver, GPUs (grouped, with archs and brands) and container runtime."""

    def shown(gpu: Gpu) -> str:
        return f"{gpu.name} ({gpu.arch or 'arch unknown'}, {gpu.brand or 'brand unknown'})"

    gpus = ", ".join(f"{n}x {shown(gpu)}" if n > 1 else shown(gpu) for gpu, n in Counter(node.gpus).items())
    runtime = {True: "configured", False: "not configured", None: "not checked"}[node.container_runtime]
    driver = (node.driver or "none found") + (f" (R{node.branch}'s first release)" if node.branch else "")
    kit = (
        "no container toolkit"
        if node.toolkit == toolkit.NONE
        else f"container toolkit {node.toolkit or 'version not known'}"
    )
    return (
        f"node ({node.source}): driver {driver}; GPUs: {gpus or 'none'}; NVIDIA container runtime: {runtime}; {kit}"
        + (f"; Docker {node.engine}" if node.engine else "")
        + (f"; CPU {node.cpu}" if node.cpu else "")
    )


def _strings(row: dict[str, object], key: str) -> list[str]:
    value = row.get(key, [])
    return [str(item) for item in value] if isinstance(value, list) else []


def format_report(rows: Sequence[dict[str, object]], node: Node) -> str:
    """The report for people: the node, then RUNS / NO per image with how, its reasons and notes.

    Reasons and notes shared by every image are said once under the node line instead of on every image.
    """
    every_reason = _common(rows, "reasons")
    every_note = _common(rows, "run_notes")
    runs = [row for row in rows if row["runs"] is True]
    lines = [describe_node(node)]
    lines += [f"  every image: {reason}" for reason in every_reason]
    lines += [f"  every image, note: {note}" for note in every_note]
    ways = [
        f"{count} through {path}"
        for path in PATHS[1:]
        if (count := sum(1 for row in runs if row.get("runs_through") == path))
    ]
    lines.append(f"{len(runs)} of {len(rows)} images run on this node" + (f" ({', '.join(ways)})." if ways else "."))
    lines.append("")
    for row in rows:
        tags = _strings(row, "tags")
        ref = f"{row['image']}:{tags[0] if tags else '?'}"
        how = row.get("runs_through")
        lines.append(f"{'RUNS' if row['runs'] is True else 'NO':<5} {ref}" + (f"  [{how}]" if how in PATHS[1:] else ""))
        lines += [f"        - {reason}" for reason in _strings(row, "reasons") if reason not in every_reason]
        lines += [f"        note: {note}" for note in _strings(row, "run_notes") if note not in every_note]
    return "\n".join(lines)


def _common(rows: Sequence[dict[str, object]], key: str) -> list[str]:
    if len(rows) < 2:
        return []
    first = _strings(rows[0], key)
    return [item for item in first if all(item in _strings(row, key) for row in rows[1:])]
