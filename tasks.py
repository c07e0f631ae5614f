"""Invoke tasks: flags in, one call into the dlimages package, output out. Rules live in the package.

invoke matrix [--json] [--explain]     the valid cells, or why combinations were excluded
invoke render [--check]                write images/ from matrix.yaml + templates/, or verify it
invoke build --cuda 11.8 --torch 2.1 [--dry-run]
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from invoke import Collection, Context, task
from invoke.exceptions import Exit

from dlimages import baselock, basesource, inimage, reportdiff
from dlimages import ci as ci_plan
from dlimages import disk as data_disk
from dlimages import doctor as node_doctor
from dlimages import lock as lock_files
from dlimages import repro as reproducibility
from dlimages import tags as tag_rules
from dlimages.advice import Remedies
from dlimages.bake import (
    BAKE_FILE,
    MAX_JOBS,
    bake_document,
    cache_export_problem,
    cache_problems,
    jobs_from_flags,
    out_problems,
    write_bake,
)
from dlimages.base import make_base_argv, missing_bases
from dlimages.builder import all_built, builder_driver, next_commands, run_bakes, run_builds, summary_table
from dlimages.buildplan import BuildPlan, Secrets, local_bases, plan_run
from dlimages.cells import Cell
from dlimages.changes import changed_since
from dlimages.engine import NO_SETUP_HELP, EngineUnavailable, ensure_engine, setup_allowed
from dlimages.errors import InputError, Problem
from dlimages.ledger import LEDGER_FILE, Ledger
from dlimages.project import Project, find_root
from dlimages.push import MAX_RETRIES, PushError, PushInterrupted, plan_push, push_image, retries_from_flag
from dlimages.report import build_report, image_manifest, report_target, write_report
from dlimages.runner import DEFAULT as RUNNER
from dlimages.runner import run_folder
from dlimages.selection import Selection, flags_for, select
from dlimages.tables import cells_table, exclusions_text

F = TypeVar("F", bound=Callable[..., Any])

SELECT_HELP = {
    "cuda": "CUDA version, e.g. 11.8 (default: every CUDA version)",
    "torch": "PyTorch version; partial picks the newest patch, e.g. 2.1 -> 2.1.2",
    "tf": "TensorFlow version; partial picks the newest patch, e.g. 2.14 -> 2.14.1",
    "python": "Python version, e.g. 3.10 (default: the image's default Python where the cell has it)",
    "flavor": "runtime or devel (default: the image's default flavor)",
}

LEDGER = str(LEDGER_FILE)

# The package logs its progress (build headers, notes); people read it on stdout, in order with build output.
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)


def _project() -> Project:
    return Project(find_root(Path(__file__).parent))


def reports_input_errors(body: F) -> F:
    """Turn input problems into one clear message each and exit code 2, never a traceback."""

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return body(*args, **kwargs)
        except InputError as error:
            raise Exit(error.report(), code=2) from None

    return wrapper  # type: ignore[return-value]


def _print_line(line: str) -> None:
    print(line, flush=True)


def _engine(no_engine_setup: bool, *, buildx: bool = True) -> None:
    """Make sure an engine answers: start one (scripts/engine.sh) unless the person manages Docker themselves."""
    try:
        ensure_engine(_project().root, RUNNER, setup=setup_allowed(no_engine_setup), on_line=_print_line, buildx=buildx)
    except EngineUnavailable as error:
        raise Exit(f"error: {error}", code=1) from None


def _warn_if_short_of_disk(builds: int) -> None:
    """Say so before a long build that the data root may fill up (cached layers need less, so only a warning)."""
    root = data_disk.data_root(RUNNER)
    warning = data_disk.shortfall(root, data_disk.build_need(builds)) if root else None
    if warning:
        print(
            f"warning: {warning} (a cold build of one cell peaks at about {data_disk.gb(data_disk.COLD_BUILD_PEAK)}, "
            "layers already in the cache need less)",
            flush=True,
        )


def _make_local_bases(c: Context, images: list[str]) -> None:
    for image in missing_bases(images, RUNNER):
        if os.geteuid() != 0:  # mmdebstrap --mode=root: the one step of a build that needs root, once per engine
            raise Exit(f'error: {image} is missing; making it needs root, once: sudo "$(command -v invoke)" base', 1)
        print(f"{image} is missing: making it with `invoke base`")
        base(c, no_engine_setup=True)


@task(
    help={
        "json": "print a JSON array, one object per cell (with `flags`, the `invoke build` flags that select it)",
        "explain": "show every excluded combination and why",
        "since": "only the cells whose inputs (images/ folder, assets, base digests) changed since this commit; "
        "empty, or a commit this clone lacks: every cell (stderr says which)",
    }
)
@reports_input_errors
def matrix(c: Context, json_: bool = False, explain: bool = False, since: str | None = None) -> None:
    """Show the valid cells of matrix.yaml (or, with --explain, what was excluded and why)."""
    project = _project()
    expansion = project.expansion
    cells = expansion.cells
    if since is not None:
        changed = changed_since(project.root, cells, since, RUNNER)
        cells = changed.cells
        print(changed.note(len(expansion.cells)), file=sys.stderr)
    locks = {cell.slug: lock_files.lock_state(project.root, cell, project.matrix.packages.pip).status for cell in cells}
    if json_:
        extra = {cell.slug: {"flags": flags_for(cell), "bootstrap": cell.bootstrap_base} for cell in cells}
        entries = [{"cell": c.slug, **c.as_json(), **extra[c.slug], "lock": locks[c.slug]} for c in cells]
        print(json.dumps(entries, indent=2))
    elif explain:
        print(exclusions_text(expansion.excluded))
        print(f"\n{len(expansion.cells)} valid cells, {len(expansion.excluded)} combinations excluded.")
    else:
        print(cells_table(cells, locks))
        unlocked = sum(status != "locked" for status in locks.values())
        print(
            f"\n{len(cells)} valid cells ({unlocked} not locked: pip resolves them at build time, so their "
            f"builds are not reproducible); `invoke matrix --explain` shows the {len(expansion.excluded)} excluded."
        )


@task(help={"check": "do not write; fail if images/ is stale or hand-edited"})
@reports_input_errors
def render(c: Context, check: bool = False) -> None:
    """Render every cell's Dockerfile into images/ (deterministic; nothing written if validation fails)."""
    project = _project()
    if check:
        print(f"images/ and the generated docs are up to date ({project.check_rendered()} files).")
        return
    changed, total = project.write_rendered()
    for change in changed:
        print(change)
    print(f"{len(changed)} of {total} files changed.")


JOBS_HELP = {
    "jobs": f"build N cells at once (1 to {MAX_JOBS}) through `docker buildx bake` on the current builder "
    "(default 1: one by one)",
    "cache_from": "with --jobs: import layers from this cache, e.g. type=registry,ref=HOST/NAME:cache",
    "cache_to": "with --jobs: export layers to this cache (type=registry,...: not on the docker driver, which "
    "exports only type=inline; use a docker-container, remote or kubernetes builder)",
}
ENGINE_HELP = {"no_engine_setup": NO_SETUP_HELP}
BUILD_HELP = {
    **SELECT_HELP,
    "mirror": "mirror profile: none, daocloud, tuna, aliyun, ustc (matrix.yaml) or host (this machine's apt mirror)",
    "base_registry": "take every base image from this registry, HOST[:PORT][/PATH] (after `invoke bases.mirror --to`)",
    "ca_bundle": "extra CA bundle for pip inside the build (a BuildKit secret); default: this host's bundle",
    **ENGINE_HELP,
}


@task(
    auto_shortflags=False,  # -h stays help: Invoke would give it to --cache-from
    help={
        **BUILD_HELP,
        "dry_run": "print the exact docker commands and tags; touch nothing",
        "netrc": "netrc file with private-index credentials (a BuildKit secret)",
        "keep_going": "after a failed cell, build the remaining ones (the exit code still reports the failure)",
        **JOBS_HELP,
    },
)
@reports_input_errors
def build(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    mirror: str = "none",
    base_registry: str | None = None,
    dry_run: bool = False,
    ca_bundle: str | None = None,
    netrc: str | None = None,
    keep_going: bool = False,
    no_engine_setup: bool = False,
    jobs: str = "1",  # text, checked by the package: a wrong type is exit 2, not Invoke's traceback
    cache_from: str | None = None,
    cache_to: str | None = None,
) -> None:
    """Build the selected cells (--dry-run prints the commands and tags; --jobs N builds N at once with bake)."""
    project = _project()
    cells = select(project.matrix, project.expansion, Selection.from_flags(cuda, torch, tf, python, flavor))
    secrets = Secrets.from_flags(ca_bundle, netrc)
    parallel = jobs_from_flags(jobs, cache_from, cache_to)
    plans = _plans(project, cells, mirror, secrets, base_registry, resolve_bases=False)  # every flag checked
    if dry_run:
        print("\n\n".join(plan.describe() for plan in plans))
        return
    _engine(no_engine_setup)  # installs skopeo too, which asks a base registry for digests
    refused = cache_export_problem(builder_driver(RUNNER), cache_to) if parallel > 1 else None
    if refused:
        raise Exit(refused, code=2)
    plans = _plans(project, cells, mirror, secrets, base_registry)
    _make_local_bases(c, local_bases(plans))
    _warn_if_short_of_disk(len(plans))
    try:
        remedies = Remedies.from_matrix(project.matrix, project.expansion.cells)
        if parallel > 1:
            results = run_bakes(
                plans,
                project.root,
                run_folder(),
                jobs=parallel,
                keep_going=keep_going,
                remedies=remedies,
                cache_from=[cache_from] if cache_from else [],
                cache_to=[cache_to] if cache_to else [],
            )
        else:
            results = run_builds(plans, project.root, keep_going=keep_going, remedies=remedies)
    except KeyboardInterrupt:
        raise Exit(
            "interrupted: the cell being built was not tagged; earlier cells keep their tags", code=130
        ) from None
    print("\n" + summary_table(results, cells))
    Ledger(project.root).record(results)
    if next_commands(results):
        print("\n" + next_commands(results))
    if not all_built(results, cells):
        raise Exit(code=1)


@task(
    auto_shortflags=False,  # -h stays help: Invoke would give it to --cache-from
    help={
        **SELECT_HELP,
        "mirror": BUILD_HELP["mirror"],
        "base_registry": BUILD_HELP["base_registry"],
        "ca_bundle": BUILD_HELP["ca_bundle"],
        "netrc": "netrc file with private-index credentials (a BuildKit secret: the file names its path only)",
        "cache_from": "add this cache import to every target, e.g. type=registry,ref=HOST/NAME:cache",
        "cache_to": "add this cache export to every target (not on the docker driver but type=inline)",
        "out": f"the bake file to write (default {BAKE_FILE}; its paths are relative to the repository root): a new "
        "file, one `invoke bake` wrote, or any under .work/; never a file git tracks",
    },
)
@reports_input_errors
def bake(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    mirror: str = "none",
    base_registry: str | None = None,
    ca_bundle: str | None = None,
    netrc: str | None = None,
    cache_from: str | None = None,
    cache_to: str | None = None,
    out: str = BAKE_FILE,
) -> None:
    """Write a bake file (JSON) with the selected cells' builds, for any buildx builder to run in parallel."""
    project = _project()
    cells = select(project.matrix, project.expansion, Selection.from_flags(cuda, torch, tf, python, flavor))
    secrets = Secrets.from_flags(ca_bundle, netrc)
    problems = cache_problems("--cache-from", cache_from) + cache_problems("--cache-to", cache_to)
    problems += out_problems(out, project.root, RUNNER)
    if problems:
        raise InputError(problems)
    plans = _plans(project, cells, mirror, secrets, base_registry, resolve_bases=False)
    for plan in plans:
        for note in (*plan.mirror.notes, *plan.notes):
            print(f"note ({plan.cell.slug}): {note}")
    document = bake_document(
        plans, cache_from=[cache_from] if cache_from else [], cache_to=[cache_to] if cache_to else []
    )
    write_bake(out, document)
    print(f"{out}: {len(plans)} target(s); from here, `docker buildx bake --file {shlex.quote(out)}` builds them")


def _plans(
    project: Project,
    cells: list[Cell],
    mirror: str,
    secrets: Secrets,
    base_registry: str | None,
    *,
    resolve_bases: bool = True,
) -> list[BuildPlan]:
    workdir = run_folder()
    try:
        return plan_run(
            project.root,
            project.matrix,
            cells,
            mirror,
            secrets,
            RUNNER,
            workdir=workdir,
            base_registry=base_registry,
            every_cell=project.expansion.cells,
            resolve_bases=resolve_bases,
        )
    except basesource.BaseUnavailable as error:
        raise Exit(str(error), code=1) from None


@task(
    help={
        **BUILD_HELP,
        "against": "compare one cold build with this local image (e.g. the one `invoke build` made) instead of two",
        "dockerfile": "check any Dockerfile instead of a cell (built with the cells' reproducibility settings)",
        "context": "the build context for --dockerfile (default: the Dockerfile's folder)",
    }
)
@reports_input_errors
def repro(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    against: str | None = None,
    dockerfile: str | None = None,
    context: str | None = None,
    mirror: str | None = None,  # None, not "none": --dockerfile refuses a --mirror given, even `--mirror none`
    base_registry: str | None = None,
    ca_bundle: str | None = None,
    no_engine_setup: bool = False,
) -> None:
    """Prove a build reproducible: build it cold twice (or once --against an image) and name every difference."""
    project = _project()
    cell_flags = {"--cuda": cuda, "--torch": torch, "--tf": tf, "--python": python, "--flavor": flavor}
    cell_flags |= {"--mirror": mirror, "--base-registry": base_registry, "--ca-bundle": ca_bundle}
    problems = reproducibility.flag_problems(dockerfile, context, against, cell_flags)
    if problems:
        raise InputError(problems)
    mirror = "none" if mirror is None else mirror
    workdir = run_folder()
    if dockerfile is not None:
        build = reproducibility.dockerfile_build(*reproducibility.dockerfile_flags(dockerfile, context))
        _engine(no_engine_setup)
        name, dirty = dockerfile, False
        builds = [(name, build)]
    else:
        cells = select(project.matrix, project.expansion, Selection.from_flags(cuda, torch, tf, python, flavor))
        secrets = Secrets.from_flags(ca_bundle, None)
        _plans(project, cells, mirror, secrets, base_registry, resolve_bases=False)  # every flag checked
        _engine(no_engine_setup)
        plans = _plans(project, cells, mirror, secrets, base_registry)
        _make_local_bases(c, local_bases(plans))
        builds = [(plan.cell.slug, plan.build) for plan in plans]
        dirty = any(plan.build_arg("REVISION").endswith("-dirty") for plan in plans)
    outcomes = [
        reproducibility.reproduce(name, argv, project.root, RUNNER, workdir, against=against, dirty=dirty)
        for name, argv in builds
    ]
    print("\n" + "\n".join(outcome.report() for outcome in outcomes))
    if not all(outcome.reproducible for outcome in outcomes):
        raise Exit(code=1)


@task(
    iterable=["upgrade_package"],
    help={
        **SELECT_HELP,
        "python": "Python version, e.g. 3.10 (default: every Python)",
        "flavor": "runtime or devel (default: both)",
        "check": "resolve nothing; fail if a lock is stale or broken, or a PyPI-only cell has none",
        "upgrade_package": "let this package move to its newest allowed version (repeatable); others keep their pins",
        "timeout": f"seconds one cell may take to resolve (default {lock_files.RESOLVE_TIMEOUT_S:g})",
    },
)
@reports_input_errors
def lock(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    check: bool = False,
    upgrade_package: list[str] | None = None,
    timeout: str = str(lock_files.RESOLVE_TIMEOUT_S),
) -> None:
    """Resolve each selected cell's complete package set with hashes (uv) into images/<framework>/<cell>/*.lock."""
    project = _project()
    want = Selection.from_flags(cuda, torch, tf, python, flavor)
    cells = select(project.matrix, project.expansion, want, defaults=False)
    pip = project.matrix.packages.pip
    if check:
        problems = lock_files.lock_problems(project.root, project.expansion.cells, pip)
        if problems:
            raise Exit(InputError(problems, heading="Locks do not match matrix.yaml:").report(), code=1)
        print(lock_files.summary(project.root, project.expansion.cells, pip))
        return
    results = lock_files.lock_cells(
        project.root, cells, pip, RUNNER, upgrade=upgrade_package or [], timeout=lock_files.timeout_from_flag(timeout)
    )
    changed, _ = project.write_rendered()
    print(f"{sum(r.ok for r in results)} of {len(results)} cells locked; render: {len(changed)} files changed.")
    if not all(r.ok for r in results):
        raise Exit(code=1)


@task(
    help={
        "mirror": "Debian mirror URL to bootstrap from (default: read from this host's apt sources)",
        "check": "build the tarball twice and fail unless both, and the image IDs, are identical",
        **ENGINE_HELP,
    }
)
@reports_input_errors
def base(c: Context, mirror: str | None = None, check: bool = False, no_engine_setup: bool = False) -> None:
    """Make the offline Debian 12 base image (mmdebstrap, then `docker load` with a fixed config: same ID each time)."""
    argv = make_base_argv(_project().root, mirror, check=check)
    _engine(no_engine_setup, buildx=False)
    code = RUNNER.stream(argv, _print_line)
    if code:
        raise Exit(f"error: scripts/make-base.sh exited {code}", code=1)


BASES_SELECT_HELP = {
    **SELECT_HELP,
    "python": "Python version, e.g. 3.10 (default: every Python)",
    "flavor": "runtime or devel (default: both)",
}


@task(
    help={
        **BASES_SELECT_HELP,
        "lock": "ask each registry for the digest every base tag names now and record it in images/bases.lock.json",
    },
)
@reports_input_errors
def bases_list(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    lock: bool = False,
) -> None:
    """List the base images the selected cells pull and the digests builds pin them to (--lock: refresh them)."""
    project = _project()
    cells = select(
        project.matrix, project.expansion, Selection.from_flags(cuda, torch, tf, python, flavor), defaults=False
    )
    path = project.root / baselock.LOCK_FILE
    recorded = baselock.BaseLock.load(path)
    refs = baselock.pulled_bases(cells)
    if lock:
        recorded, results = baselock.refresh(recorded, refs, RUNNER)
        recorded.write(path)
        for result in results:
            print(f"{'recorded' if result.ok else 'NOT recorded'} {result}")
        print(f"{baselock.LOCK_FILE}: {sum(r.ok for r in results)} of {len(results)} bases recorded now.")
        if not all(r.ok for r in results):
            raise Exit(code=1)
        return
    for ref in refs:
        print(f"{ref} -> {recorded.pinned(ref) or 'no recorded digest: pulled by tag (not reproducible)'}")


@task(
    iterable=["image"],
    help={
        **BASES_SELECT_HELP,
        "to": "the registry to copy into, HOST[:PORT][/PATH]; builds then take bases from it with --base-registry",
        "image": "also copy this image (repeatable): a local one from this engine, else from its registry",
        "dry_run": "print the skopeo commands; copy nothing",
        **ENGINE_HELP,
    },
)
@reports_input_errors
def bases_mirror(
    c: Context,
    to: str | None = None,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    image: list[str] | None = None,
    dry_run: bool = False,
    no_engine_setup: bool = False,
) -> None:
    """Copy every base image the selected cells use into a registry of your own (skopeo, all layers, by digest)."""
    if not to:
        raise InputError([Problem("--to", "give the registry to copy into", "HOST[:PORT][/PATH]")])
    project = _project()
    cells = select(
        project.matrix, project.expansion, Selection.from_flags(cuda, torch, tf, python, flavor), defaults=False
    )
    extra = inimage.check_images(image or [])
    lock = baselock.BaseLock.load(project.root / baselock.LOCK_FILE)
    basesource.mirror_copies(cells, to, lock, extra, local=lambda _: False)  # every problem is exit 2 before the engine
    if not dry_run:
        _engine(no_engine_setup, buildx=False)
        _make_local_bases(c, [cell.base_image for cell in cells if cell.bootstrap_base])
    copies = basesource.mirror_copies(cells, to, lock, extra, local=RUNNER.image_exists)
    workdir = run_folder()
    if dry_run:
        print("\n".join(shlex.join(argv) for item in copies for argv in item.commands(workdir)))
        return
    results = []
    for number, item in enumerate(copies, start=1):
        print(f"[{number}/{len(copies)}] {item.source} -> {item.destination}", flush=True)
        results.append(basesource.copy(item, RUNNER, workdir, _print_line))
        print(results[-1], flush=True)
    print(f"{sum(r.ok for r in results)} of {len(results)} images copied to {to}; build with --base-registry {to}")
    if not all(r.ok for r in results):
        raise Exit(code=1)


@task(
    iterable=["image"],
    help={"image": "image to test (repeatable); default: the images the last `invoke build` made", **ENGINE_HELP},
)
@reports_input_errors
def test(c: Context, image: list[str], no_engine_setup: bool = False) -> None:
    """Run the image tests (pytest + testinfra) against built images."""
    root = _project().root
    images = inimage.check_images(image) if image else inimage.check_images(Ledger(root).built_refs(), LEDGER)
    if not images:
        raise InputError([Problem("--image", "no image given and no successful `invoke build` recorded")])
    _engine(no_engine_setup)
    c.run(ci_plan.image_tests(root, sys.executable, images, gpu=False).command + " -m image", pty=False)


@task(
    iterable=["registry", "image"],
    help={
        "registry": "registry to push to, HOST[:PORT][/PATH] (repeatable)",
        "image": "local image ref to push (repeatable); default: every tag of the cells the last builds made",
        "report": "where to write the JSON build report (cell, tags, digest, size, package manifest)",
        "retries": f"retries for transient failures, 0 to {MAX_RETRIES} (backoff doubles from 2 s)",
        "force_overwrite": "replace another image a registry already has under an immutable tag (never needed for "
        "moving tags such as v1.0)",
        "git_ref": "for CI, with --default-branch and --commit: the git ref built (e.g. refs/heads/main); only the "
        "default branch publishes release tags, any other ref each cell's immutable tag with the commit appended",
        "default_branch": "for CI: the repository's default branch, e.g. main (with --git-ref)",
        "commit": "for CI: the commit built, its full SHA (with --git-ref)",
        **ENGINE_HELP,
    },
)
@reports_input_errors
def push(
    c: Context,
    registry: list[str],
    image: list[str],
    report: str = ".work/build-report.json",
    retries: str = "3",  # text, checked by the package: a wrong type is exit 2, not Invoke's traceback
    force_overwrite: bool = False,
    git_ref: str | None = None,
    default_branch: str | None = None,
    commit: str | None = None,
    no_engine_setup: bool = False,
) -> None:
    """Push built images to registries, verify each digest by pulling it back, write the build report."""
    ledger = Ledger(_project().root)
    if not registry:
        raise InputError([Problem("--registry", "give at least one registry", "HOST[:PORT], e.g. 127.0.0.1:5000")])
    attempts, report_path = retries_from_flag(retries), report_target(ledger.root, report)
    origin = tag_rules.Origin.from_flags(git_ref, default_branch, commit)
    moving = ledger.moving_refs()
    names = tag_rules.published_refs(image or ledger.built_refs(every_tag=True), moving, origin)
    if not names:
        raise InputError([Problem("--image", "no image given and no successful `invoke build` recorded")])
    refs = list(names)
    plan_push(refs, registry, names)  # every bad ref or registry is exit 2 before anything starts
    _engine(no_engine_setup, buildx=False)
    try:
        results = push_image(
            refs, registry, retries=attempts, moving=moving, force_overwrite=force_overwrite, names=names
        )
        manifests = {ref: image_manifest(ref) for ref in dict.fromkeys(r.ref for r in results)}
    except PushInterrupted as stopped:
        raise Exit(f"error: {stopped}", code=stopped.exit_code) from None
    except PushError as error:
        raise Exit(f"error: {error}\nNothing local was changed.", code=1) from None
    for result in results:
        print(f"pushed {result.remote_ref} {result.digest} (verified by pulling it back)")
    try:
        write_report(report_path, build_report(results, manifests, ledger.cells_by_ref()))
    except OSError as error:
        raise Exit(f"error: pushed, but the build report {report} could not be written: {error}", code=1) from None
    print(f"build report: {report}")


@task(
    iterable=["image"],
    help={
        "image": "local image to smoke-test (repeatable)",
        "no_gpus": "run without --gpus all (expects exit 77)",
        **ENGINE_HELP,
    },
)
@reports_input_errors
def smoke(c: Context, image: list[str], no_gpus: bool = False, no_engine_setup: bool = False) -> None:
    """GPU smoke test inside each image: CUDA visible, versions match labels, a real AMP training step."""
    if not image:
        raise InputError([Problem("--image", "give at least one image")])
    refs = inimage.check_images(image)
    _engine(no_engine_setup, buildx=False)
    codes = {
        ref: inimage.run_in_image(RUNNER, ref, ["dl-smoke"], gpus=not no_gpus, on_line=_print_line) for ref in refs
    }
    for ref, code in codes.items():
        print(f"{ref}: exit {code} ({inimage.meaning(code)})")
    worst = inimage.worst(codes.values())
    if worst:
        raise Exit(code=worst)


@task(
    help={
        "image": "local image to benchmark",
        "batch_size": "batch size, or MODE=N pairs, e.g. 128,amp_fp16_cl=256",
        "modes": "comma-separated modes (fp32,tf32,amp_fp16,amp_fp16_cl,bf16_cl,compile)",
        "gpus": "all (or a number): also all-reduce bus bandwidth and DDP ResNet-50 scaling across GPUs (PyTorch)",
        **ENGINE_HELP,
    }
)
@reports_input_errors
def bench(
    c: Context,
    image: str | None = None,
    batch_size: str = "128,amp_fp16_cl=256,bf16_cl=256",
    modes: str = "",
    gpus: str | None = None,
    no_engine_setup: bool = False,
) -> None:
    """Synthetic ResNet-50 training benchmark inside the image (images/s, peak memory), as JSON."""
    if image is None:
        raise InputError([Problem("--image", "give the image to benchmark")])
    [ref] = inimage.check_images([image])
    command = inimage.bench_command(batch_size, modes or None, gpus)  # exit 2 here, not "skipped" in the image
    _engine(no_engine_setup, buildx=False)
    code = inimage.run_in_image(RUNNER, ref, command, gpus=True, on_line=_print_line)
    if code:
        raise Exit(f"{ref}: dl-bench exit {code} ({inimage.meaning(code)})", code=code)


@task(
    help={
        "gpu": "GPU architecture(s) of the node to ask about, e.g. sm_90 or 8.6,9.0 (with --driver)",
        "driver": "NVIDIA driver version of that node, e.g. 535.104.05 (with --gpu)",
        "brand": "GPU brand(s) as the NVIDIA container toolkit names them: tesla or nvidia (data-center), geforce, "
        "quadro, nvidiartx, ...; one for all GPUs or one each (default: read on this host; for --gpu, judged as "
        "not data-center, saying where a data-center GPU differs)",
        "json": "print a JSON array: each cell as `invoke matrix --json` gives it, plus runs, runs_through, reasons, "
        "needs_driver and run_notes",
    }
)
@reports_input_errors
def doctor(
    c: Context, gpu: str | None = None, driver: str | None = None, brand: str | None = None, json_: bool = False
) -> None:
    """Tell which images of the matrix will run on this GPU node (or on one described by --gpu/--driver), and how."""
    node = node_doctor.node_from_flags(gpu, driver, node_doctor.probe_host, brand)
    rows = node_doctor.report(_project().expansion.cells, node)
    print(json.dumps(rows, indent=2) if json_ else node_doctor.format_report(rows, node))


@task(help={"need": "exit 1 unless at least this many GB are free on the data root", **ENGINE_HELP})
@reports_input_errors
def disk(c: Context, need: str = "0", no_engine_setup: bool = False) -> None:
    """Where the engine keeps its data, what is free, what it holds, and the commands that give space back."""
    needed = data_disk.need_from_flag(need)
    _engine(no_engine_setup, buildx=False)
    root = data_disk.data_root(RUNNER)
    if root is None:
        raise Exit("error: the Docker engine did not say where it keeps its data (`docker info` failed)", code=1)
    print("\n".join(data_disk.describe(root, data_disk.system_df(RUNNER))))
    short = data_disk.shortfall(root, needed)
    if short:
        raise Exit(f"error: {short}", code=1)


@task
def check(c: Context) -> None:
    """The gating checks: every linter (pre-commit), the render check, the unit and GPU tests."""
    for step in ci_plan.checks(_project().root, sys.executable):
        print(f"\n##### {step.name}: {step.command}", flush=True)
        c.run(step.command, pty=False)


def _print_free_space(after: str) -> None:
    """One line per CI step, so that a run's disk use can be read from its log."""
    root = data_disk.data_root(RUNNER)
    if root is not None and root.free is not None:
        print(f"##### disk after {after}: {data_disk.gb(root.free)} free on {root.path}", flush=True)


@task
def ci(c: Context) -> None:
    """End to end (README's test command, run by CI): an engine of its own, checks, real builds, push, the user's
    commands as an unprivileged user, image and GPU tests; the engine and its data root are deleted at the end."""
    if os.geteuid() != 0:
        raise Exit("error: `invoke ci` starts an engine of its own and creates a user: run it as root", code=2)
    root = _project().root
    engine = Path(tempfile.mkdtemp(prefix=ci_plan.ENGINE_PREFIX, dir=ci_plan.ENGINE_PARENT))
    os.environ["DOCKER_HOST"] = f"unix://{engine}/docker.sock"  # every step below, and the image tests
    timings: list[tuple[str, float]] = []
    try:
        for step in ci_plan.end_to_end(root, engine):
            print(f"\n##### {step.name}: {step.command}", flush=True)
            start = time.monotonic()
            c.run(step.command, pty=False)
            timings.append((step.name, time.monotonic() - start))
            _print_free_space(step.name)
        print("\n" + "\n".join(f"{name:>40}: {seconds:7.1f} s" for name, seconds in timings), flush=True)
        # Last, so that pytest's closing line is the run's verdict (GPU tests: skipped without a GPU, never passed).
        c.run(ci_plan.image_tests(root, sys.executable, Ledger(root).built_refs()).command, pty=False)
    finally:
        for step in ci_plan.cleanup(root, engine):
            c.run(step.command, warn=True, hide=True)


@task(
    help={
        "before": "folder of the previous build reports (*.json, searched below it); missing or empty: no comparison",
        "after": "folder of this build's reports (as `invoke push --report` writes them)",
    }
)
@reports_input_errors
def package_diff(c: Context, before: str = "", after: str = "") -> None:
    """Print, as Markdown, which pip and dpkg packages each cell's image changed between two sets of build reports."""
    if not after:
        raise InputError([Problem("--after", "give the folder of this build's reports")])
    new = reportdiff.load_reports(after, "--after", required=True)
    old = reportdiff.load_reports(before, "--before", required=False)
    print(reportdiff.diff_markdown(reportdiff.report_diff(old, new), compared=bool(old)), end="")


bases = Collection("bases")
bases.add_task(bases_list, name="list", default=True)
bases.add_task(bases_mirror, name="mirror")
namespace = Collection(
    matrix, render, build, bake, repro, lock, base, bases, test, push, smoke, bench, doctor, disk, check, ci
)
namespace.add_task(package_diff)
