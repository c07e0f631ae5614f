"""Run build plans against the Docker engine: stream progress, tag only on success, explain failures."""

from __future__ import annotations

import collections
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from dlimages.buildplan import BuildPlan
from dlimages.cells import Cell
from dlimages.runner import DEFAULT, Runner
from dlimages.tables import format_table

log = logging.getLogger(__name__)

# What a failed build printed, mapped to what the person should do about it.
KNOWN_FAILURES: tuple[tuple[str, str], ...] = (
    (
        "DO NOT MATCH THE HASHES",
        "a downloaded file does not match the hash the cell's lock records (images/<framework>/<cell>/*.lock): the "
        "index or mirror serves a different file, or the lock was edited. Nothing was installed from it; re-lock "
        "(`invoke lock ...`) only if you trust the new file",
    ),
    (
        "Hashes are required in --require-hashes mode",
        "the cell's lock misses a package or a hash (edited by hand?): run `invoke lock` for the cell",
    ),
    (
        "no space left on device",
        "the disk is full: free space (`docker builder prune`, `docker image prune`) and rerun",
    ),
    (
        "No matching distribution found for",
        "a pinned package version does not exist on the index: check matrix.yaml pins",
    ),
    ("Could not find a version that satisfies", "a pinned package version does not exist on the index: check pins"),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "TLS verification failed: behind an intercepting proxy, pass its CA with --ca-bundle",
    ),
    ("Cannot connect to the Docker daemon", "the Docker engine is not reachable: start it (e.g. `bash .ci/engine.sh`)"),
    ("pull access denied", "the base image is not available locally and cannot be pulled: make it (`invoke base`)"),
    ("failed to resolve source metadata", "the base image cannot be pulled here: make or load it locally first"),
    ("Temporary failure resolving", "a package mirror is not reachable: choose another --mirror profile"),
    ("Unable to locate package", "an apt package is missing from this OS release or mirror"),
)


@dataclass(frozen=True)
class BuildResult:
    cell: Cell
    ok: bool
    seconds: float
    image_id: str | None = None
    size: int | None = None
    error: str | None = None

    @property
    def tags(self) -> tuple[str, ...]:
        return self.cell.refs if self.ok else ()


def explain_failure(output: Sequence[str]) -> str:
    text = "\n".join(output)
    for needle, advice in KNOWN_FAILURES:
        if needle in text:
            return advice
    last = next((line.strip() for line in reversed(output) if line.strip()), "no output")
    return f"the build failed: {last[:300]}"


def run_build(plan: BuildPlan, root: Path, out: TextIO = sys.stdout, runner: Runner = DEFAULT) -> BuildResult:
    """Build one cell into an image ID, then apply its tags: a failed or interrupted build tags nothing."""
    plan.iidfile.parent.mkdir(parents=True, exist_ok=True)
    plan.iidfile.unlink(missing_ok=True)
    tail: collections.deque[str] = collections.deque(maxlen=400)

    def show(line: str) -> None:
        out.write(line + "\n")
        tail.append(line)

    start = time.monotonic()
    code = runner.stream(plan.build, show, cwd=root)
    seconds = time.monotonic() - start
    if code != 0 or not plan.iidfile.is_file():
        return BuildResult(plan.cell, False, seconds, error=explain_failure(list(tail)))
    image_id = plan.iidfile.read_text().strip()
    for command in plan.tag_commands(image_id):
        tagged = runner(command)
        if not tagged.ok:
            return BuildResult(plan.cell, False, seconds, image_id, error=f"tagging failed: {tagged.err.strip()}")
    size = runner.docker("image", "inspect", "--format", "{{.Size}}", image_id)
    return BuildResult(plan.cell, True, seconds, image_id, int(size.out.strip() or 0) if size.ok else None)


def run_builds(
    plans: Sequence[BuildPlan], root: Path, *, keep_going: bool, out: TextIO = sys.stdout, runner: Runner = DEFAULT
) -> list[BuildResult]:
    results: list[BuildResult] = []
    for plan in plans:
        log.info("\n=== building %s:%s", plan.cell.image, plan.cell.immutable_tag)
        for note in (*plan.mirror.notes, *plan.notes):
            log.info("note: %s", note)
        result = run_build(plan, root, out, runner)
        results.append(result)
        if not result.ok:
            log.error("FAILED %s: %s", plan.cell.slug, result.error)
            if not keep_going:
                break
    return results


def unbuilt(results: Sequence[BuildResult], planned: Sequence[Cell]) -> list[Cell]:
    """The planned cells no build was tried for (a build before them failed and --keep-going was not given)."""
    built = {result.cell.slug for result in results}
    return [cell for cell in planned if cell.slug not in built]


def all_built(results: Sequence[BuildResult], planned: Sequence[Cell]) -> bool:
    return all(result.ok for result in results) and not unbuilt(results, planned)


def summary_table(results: Sequence[BuildResult], planned: Sequence[Cell] = ()) -> str:
    """One row per planned cell: built (ok or FAILED with advice, time, size) or not built."""
    rows = [
        [
            r.cell.slug,
            ", ".join(r.cell.tags),
            "ok" if r.ok else f"FAILED: {r.error}",
            f"{r.seconds:.0f}s",
            f"{r.size / 1e9:.2f} GB" if r.size else "-",
        ]
        for r in results
    ]
    rows += [
        [c.slug, ", ".join(c.tags), "not built (an earlier build failed)", "-", "-"] for c in unbuilt(results, planned)
    ]
    return format_table(["cell", "tags", "result", "duration", "size"], rows)
