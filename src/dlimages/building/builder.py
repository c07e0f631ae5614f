"""Run build plans against the Docker engine: stream progress, tag only on success, explain failures."""

from __future__ import annotations

import collections
import json
import logging
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from dlimages.building.advice import Attempt, Diagnosis, Remedies, diagnose
from dlimages.building.bake import bake_argv, bake_document, built_images, render_bake, target_name
from dlimages.building.plan import BuildPlan
from dlimages.building.progress import BuildProgress
from dlimages.core.display import ProgressDisplay
from dlimages.core.imagestore import Built, image_store
from dlimages.core.runner import DEFAULT, Runner, run_folder
from dlimages.model.cells import Cell
from dlimages.model.tables import format_table

log = logging.getLogger(__name__)

TABLE_WIDTH = 100  # the summary table, and the errors and advice under it, fit a terminal this wide
# The command to run a built image (docs/running.md): never a pull (a name that is not local would come from Docker
# Hub, where anyone may own the namespace), as the host user (files in the folder are theirs; any uid works),
# JupyterLab on this machine only, with the token it generates and prints, and a folder of the user's (not the
# checkout, where notebooks would mark the next build -dirty) made first, so that Docker does not make it root's.
WORKSPACE = '"$HOME/workspace"'
RUN_OPTIONS = f'--rm --pull never{{gpus}} --user "$(id -u):$(id -g)" -p 127.0.0.1:8888:8888 -v {WORKSPACE}:/workspace'


@dataclass(frozen=True)
class BuildResult:
    cell: Cell
    ok: bool
    seconds: float
    image_id: str | None = None  # the config digest: the image's identity on every store (core.imagestore)
    size: int | None = None
    error: str | None = None  # a failed build: what failed, from where, and the ways out
    diagnosis: Diagnosis | None = None  # a failed build's output read by building.advice (None: tagging failed)
    local_id: str | None = None  # what the engine names it: image_id on the classic store, the manifest digest on
    # the containerd store

    @property
    def summary(self) -> str:
        """One short line: "ok", or what failed ("PyPI unreachable (127.0.0.1:9)")."""
        if self.ok:
            return "ok"
        if self.diagnosis is not None:
            return self.diagnosis.summary
        return (self.error or "failed").split(":", 1)[0]


def attempt_of(plan: BuildPlan) -> Attempt:
    """What the advice needs to know about a build: its cell, mirror profile, the base it pulled (BASE_IMAGE, the
    name in a registry mirror when it went through one) and the indexes pip was given."""
    mirror = plan.mirror
    return Attempt(
        cell=plan.cell,
        profile=mirror.profile,
        base_image=plan.build_arg("BASE_IMAGE") or None,
        pip_index=mirror.pip_index or None,
        torch_index=mirror.torch_index or None,  # "" switches PyTorch's index off (a find-links mirror instead)
        torch_find_links=mirror.torch_find_links or None,
    )


def run_build(
    plan: BuildPlan,
    root: Path,
    out: TextIO = sys.stdout,
    runner: Runner = DEFAULT,
    *,
    remedies: Remedies | None = None,
) -> BuildResult:
    """Build one cell, then tag what BuildKit's metadata file says it built: a failed or interrupted build tags
    nothing, and its result says what failed and the ways out (`remedies`, from the matrix, lets the advice name
    profiles and cells: `Remedies.from_matrix(matrix, cells)`)."""
    plan.metadata_file.parent.mkdir(parents=True, exist_ok=True)
    plan.metadata_file.unlink(missing_ok=True)
    label = f"{plan.cell.image}:{plan.cell.immutable_tag}"
    code, tail, seconds = _stream(plan.build, label, 400, root, out, runner)
    built = Built.read(plan.metadata_file) if code == 0 else None
    if built is None:
        diagnosis = diagnose(tail, attempt_of(plan), remedies)
        return BuildResult(plan.cell, False, seconds, error=diagnosis.advice, diagnosis=diagnosis)
    return _tagged(plan, built, seconds, runner)


def run_builds(
    plans: Sequence[BuildPlan],
    root: Path,
    *,
    keep_going: bool,
    bake_jobs: int = 0,
    workdir: Path | None = None,
    out: TextIO = sys.stdout,
    runner: Runner = DEFAULT,
    remedies: Remedies | None = None,
    cache_from: Sequence[str] = (),
    cache_to: Sequence[str] = (),
) -> list[BuildResult]:
    """Build the plans one `docker buildx build` at a time, or with `bake_jobs` (`invoke build --jobs N`) in bakes
    of that many cells each, one bake after the other (bake itself has no limit on how many targets run at once;
    its files go to `workdir`). After a failed cell (or a bake with one), go on only with `keep_going`."""
    results: list[BuildResult] = []
    size = max(bake_jobs, 1)
    for first in range(0, len(plans), size):
        batch = plans[first : first + size]
        if bake_jobs:
            log.info("\n=== baking %s", ", ".join(f"{p.cell.image}:{p.cell.immutable_tag}" for p in batch))
        else:
            log.info("\n=== building %s:%s", batch[0].cell.image, batch[0].cell.immutable_tag)
        for plan in batch:
            for note in (*plan.mirror.notes, *plan.notes):
                log.info("note (%s): %s", plan.cell.slug, note) if bake_jobs else log.info("note: %s", note)
        if bake_jobs:
            folder = workdir or run_folder()
            done = run_bake(
                batch, root, folder, out, runner, remedies=remedies, cache_from=cache_from, cache_to=cache_to
            )
        else:
            done = [run_build(batch[0], root, out, runner, remedies=remedies)]
        results += done
        for result in done:
            if not result.ok:
                # One line here; the error and the ways out come once, under the summary table.
                log.error("FAILED %s: %s", result.cell.slug, result.summary)
        if not keep_going and not all(result.ok for result in done):
            break
    return results


def run_bake(
    plans: Sequence[BuildPlan],
    root: Path,
    workdir: Path,
    out: TextIO = sys.stdout,
    runner: Runner = DEFAULT,
    *,
    remedies: Remedies | None = None,
    cache_from: Sequence[str] = (),
    cache_to: Sequence[str] = (),
    no_cache: bool = False,
) -> list[BuildResult]:
    """Build `plans` at once with `docker buildx bake` (BuildKit runs their steps in parallel), then tag each cell
    whose image ID bake's metadata file gives: the targets carry no tags, so a failed cell tags nothing, as with
    `run_build`. When bake fails, BuildKit stops every target still running: the cell its error names (every cell
    when none is named) gets the advice from the output, the others say they were stopped. Each result's duration
    is the whole bake's."""
    workdir.mkdir(parents=True, exist_ok=True)
    bake_file, metadata_file = workdir / "bake.json", workdir / "bake-metadata.json"
    bake_file.write_text(render_bake(bake_document(plans, tags=False, cache_from=cache_from, cache_to=cache_to)))
    metadata_file.unlink(missing_ok=True)
    argv = bake_argv(str(bake_file), str(metadata_file), no_cache=no_cache)
    label = "bake " + ", ".join(plan.cell.slug for plan in plans)
    code, tail, seconds = _stream(argv, label, 2000, root, out, runner)
    try:
        metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
    except (OSError, ValueError):
        metadata = {}
    ids = built_images(metadata if isinstance(metadata, dict) else {}, plans)
    blamed = _failed_targets(tail, plans) if code != 0 else set()
    results = []
    for plan in plans:
        built = ids.get(plan.cell.slug)
        if built is None or plan.cell.slug in blamed:
            if plan.cell.slug in blamed or not blamed:
                diagnosis = diagnose(_lines_of(tail, plan), attempt_of(plan), remedies)
                results.append(BuildResult(plan.cell, False, seconds, error=diagnosis.advice, diagnosis=diagnosis))
            else:
                stopped = "stopped: bake ends every build when one fails (" + ", ".join(sorted(blamed)) + ")"
                results.append(BuildResult(plan.cell, False, seconds, error=stopped))
            continue
        results.append(_tagged(plan, built, seconds, runner))
    return results


def _stream(
    argv: Sequence[str], label: str, keep: int, root: Path, out: TextIO, runner: Runner
) -> tuple[int, list[str], float]:
    """Run a build command: every line of BuildKit's output as it comes, and a status line (steps done / total,
    elapsed), rewritten in place on a terminal, one line per finished step (and a heartbeat) in a log. Its exit
    code, the last `keep` lines (what the advice reads) and the seconds it took."""
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    display = ProgressDisplay(BuildProgress(label), out)

    def show(line: str) -> None:
        display.feed(line, echo=True)
        tail.append(line)

    start = time.monotonic()
    try:
        with display.ticking():
            code = runner.stream(argv, show, cwd=root)
    except KeyboardInterrupt:
        display.finish("interrupted")
        raise
    display.finish(None if code == 0 else f"failed (exit {code})")
    return code, list(tail), time.monotonic() - start


def builder_driver(runner: Runner = DEFAULT) -> str:
    """The driver of the current buildx builder (docker, docker-container, remote, kubernetes; "" if unknown)."""
    done = runner.docker("buildx", "inspect", timeout=30)
    found = re.search(r"^Driver:\s*(\S+)", done.out, re.MULTILINE) if done.ok else None
    return found.group(1) if found else ""


def _tagged(plan: BuildPlan, built: Built, seconds: float, runner: Runner) -> BuildResult:
    """Apply a built cell's tags (after a build or bake that succeeded) to the name its engine's store gives it,
    then read its size."""
    local = built.local_id(image_store(runner))
    for command in plan.tag_commands(local):
        tagged = runner(command)
        if not tagged.ok:
            error = f"tagging failed: {tagged.err.strip()}"
            return BuildResult(plan.cell, False, seconds, built.config, error=error, local_id=local)
    size = runner.docker("image", "inspect", "--format", "{{.Size}}", local)
    bytes_ = int(size.out.strip() or 0) if size.ok else None
    return BuildResult(plan.cell, True, seconds, built.config, bytes_, local_id=local)


def _failed_targets(output: Sequence[str], plans: Sequence[BuildPlan]) -> set[str]:
    """The cells bake's output says failed, by slug: a step `#N [NAME 2/9] ...` followed by `#N ERROR: ...`
    (buildx 0.13), or `ERROR: target NAME: failed to solve` (later buildx)."""
    by_target = {target_name(plan): plan.cell.slug for plan in plans}
    step_target: dict[str, str] = {}
    failed: set[str] = set()
    for line in output:
        if header := re.match(r"#(\d+) \[([A-Za-z0-9_-]+)[ \]]", line):
            step_target[header.group(1)] = header.group(2)
        elif error := re.match(r"#(\d+) ERROR", line):
            failed.add(step_target.get(error.group(1), ""))
        elif named := re.match(r"ERROR: target ([A-Za-z0-9_-]+):", line):
            failed.add(named.group(1))
    return {by_target[name] for name in failed if name in by_target}


def _lines_of(output: Sequence[str], plan: BuildPlan) -> list[str]:
    """The output lines of one target: BuildKit names it in each step (`#9 [NAME 4/9] RUN ...`), and the step's log
    lines carry that step's number; the lines naming no target (the final ERROR) are kept too."""
    name = target_name(plan)
    mine: set[str] = set()
    kept = []
    for line in output:
        step = re.match(r"#(\d+) ", line)
        if step and f"[{name} " in line:
            mine.add(step.group(1))
        if step is None or step.group(1) in mine or f"[{name} " in line:
            kept.append(line)
    return kept


def unbuilt(results: Sequence[BuildResult], planned: Sequence[Cell]) -> list[Cell]:
    """The planned cells no build was tried for (a build before them failed and --keep-going was not given)."""
    built = {result.cell.slug for result in results}
    return [cell for cell in planned if cell.slug not in built]


def all_built(results: Sequence[BuildResult], planned: Sequence[Cell]) -> bool:
    return all(result.ok for result in results) and not unbuilt(results, planned)


def next_commands(results: Sequence[BuildResult], *, gpus: bool = True) -> str:
    """The exact commands to run each image that was built (its immutable tag: what was just built, not whatever a
    moving tag names), to copy and paste; empty when nothing was built. Without `gpus` (an engine that cannot hand
    GPUs to containers) the line runs there without them, and says what to add on a GPU node."""
    refs = [result.cell.refs[0] for result in results if result.ok]
    if not refs:
        return ""
    options = RUN_OPTIONS.format(gpus=" --gpus all" if gpus else "")
    where = "" if gpus else " This engine cannot hand GPUs to containers: on a GPU node, add --gpus all."
    return "\n".join(
        [
            "Next: run it (JupyterLab on this machine only: open the http://127.0.0.1:8888/lab?token=... line it "
            f"prints; $HOME/workspace is /workspace, and what you write there stays yours).{where}",
            f"  mkdir -p {WORKSPACE}",
            *(f"  docker run {options} {shlex.quote(ref)}" for ref in refs),
        ]
    )


def summary_table(results: Sequence[BuildResult], planned: Sequence[Cell] = (), width: int = TABLE_WIDTH) -> str:
    """One short row per planned cell (ok, FAILED (n) or not built; time, size); under it the images built, to
    `docker run`, and, numbered to match, what failed with the line of output that shows it and the ways out. Every
    line fits `width` columns: a raw BuildKit error runs to hundreds of characters, so it never goes in a cell."""
    failed = [result for result in results if not result.ok]
    number = {id(result): n for n, result in enumerate(failed, start=1)}
    rows = [
        [
            r.cell.slug,
            "ok" if r.ok else f"FAILED ({number[id(r)]})",
            f"{r.seconds:.0f}s",
            f"{r.size / 1e9:.2f} GB" if r.size else "-",
        ]
        for r in results
    ]
    missing = unbuilt(results, planned)
    rows += [[cell.slug, "not built", "-", "-"] for cell in missing]
    blocks = [format_table(["cell", "result", "duration", "size"], rows)]
    built = [ref for result in results if result.ok for ref in result.cell.refs]
    if built:
        blocks.append("\n".join(["Built (`docker run` below):", *(f"  {ref}" for ref in built)]))
    blocks += [_failure_text(n, result, width) for n, result in enumerate(failed, start=1)]
    if missing:
        blocks.append("Not built: a build before them failed (--keep-going builds the others after a failure).")
    return "\n\n".join(blocks)


def _failure_text(number: int, result: BuildResult, width: int) -> str:
    """`(n) cell: summary`, the line of output that shows it, and the advice, wrapped at `width`."""
    lines = _wrap(f"({number}) {result.cell.slug}: {result.summary}", width, "")
    diagnosis = result.diagnosis
    if diagnosis is not None and diagnosis.evidence:
        lines += _wrap(f"error: {diagnosis.evidence}", width, "    ", hang="           ")
    for line in (result.error or "").splitlines():
        lines += _wrap(line, width, "    ")
    return "\n".join(lines)


def _wrap(line: str, width: int, indent: str, hang: str | None = None) -> list[str]:
    """One line of text wrapped at `width` under `indent`; a bullet's ("  - ") continuation lines under its text."""
    text = line.lstrip(" ")
    lead = indent + line[: len(line) - len(text)]
    if hang is None:
        hang = lead + ("  " if text.startswith("- ") else "")
    return textwrap.wrap(
        text, width, initial_indent=lead, subsequent_indent=hang, break_long_words=True, break_on_hyphens=False
    ) or [""]
