"""The commands that build cells: build (one by one, or N at once through bake), bake (the bake file only) and
repro (the proof that a build is reproducible)."""

from __future__ import annotations

import filecmp
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from uv import find_uv_bin

from dlimages.artifacts.ledger import Ledger
from dlimages.building import aptdebs, basesource, disk
from dlimages.building.advice import Remedies, bases_unavailable
from dlimages.building.bake import (
    BAKE_FILE,
    MAX_JOBS,
    bake_document,
    cache_export_problem,
    cache_problems,
    jobs_from_flags,
    out_problems,
    write_bake,
)
from dlimages.building.builder import all_built, builder_driver, next_commands, run_builds, summary_table
from dlimages.building.mirrors import profile_help
from dlimages.building.plan import UV_CONTEXT, BuildPlan, Secrets, local_bases, plan_run
from dlimages.commands.bases import make_local_bases
from dlimages.commands.flags import ANY_CELL, REGISTRY, AptFrom, CellFlags, Help, NoEngineSetup
from dlimages.commands.session import Failed, engine, say
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.imagestore import CLASSIC, image_store
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import run_folder
from dlimages.generate.project import Project
from dlimages.gpu.probe import probe_container_runtime
from dlimages.model.cells import Cell
from dlimages.model.selection import flags_text, select
from dlimages.repro import proof

Mirror = Annotated[str, Help(profile_help, "PROFILE")]  # its profiles read from matrix.yaml when tasks.py loads
BaseRegistry = Annotated[
    str | None, Help(f"take every base image from this registry (see `{usage.BASES_MIRROR}`)", REGISTRY)
]
CaBundle = Annotated[
    str | None,
    Help("extra CA bundle for pip inside the build (a BuildKit secret); default: this host's bundle", "FILE"),
]
Netrc = Annotated[
    str | None, Help("netrc file with private-index credentials (a BuildKit secret: in no layer)", "FILE")
]


def build(
    project: Project,
    *,
    cells: CellFlags = ANY_CELL,
    mirror: Mirror = "none",
    base_registry: BaseRegistry = None,
    dry_run: Annotated[bool, Help("print the exact docker commands and tags; touch nothing")] = False,
    ca_bundle: CaBundle = None,
    netrc: Netrc = None,
    keep_going: Annotated[
        bool, Help("after a failed cell, build the remaining ones (the exit code still reports the failure)")
    ] = False,
    no_engine_setup: NoEngineSetup = False,
    jobs: Annotated[  # text, checked by the package: a wrong type is exit 2, not Invoke's traceback
        str,
        Help(
            f"build N cells at once (1 to {MAX_JOBS}) through `docker buildx bake` on the current builder "
            "(default 1: one by one)",
            "N",
        ),
    ] = "1",
    cache_from: Annotated[
        str | None,
        Help("with --jobs: import layers from this cache, e.g. type=registry,ref=HOST/NAME:cache", "CACHE"),
    ] = None,
    cache_to: Annotated[
        str | None,
        Help(
            "with --jobs: export layers to this cache (type=registry,...: not on the docker driver, which "
            "exports only type=inline; use a docker-container, remote or kubernetes builder)",
            "CACHE",
        ),
    ] = None,
    apt_from: AptFrom = None,
    all_: Annotated[  # past the guard against no cell flag
        bool,
        Help(
            "with no cell flag: build every release (each at its image's default Python and flavor) instead of refusing"
        ),
    ] = False,
    no_space_check: Annotated[  # past the guard against too little space
        bool,
        Help(
            "build even when the selection's estimated peak space (cold builds) is more than the Docker "
            "data root has free; layers already in the build cache need less"
        ),
    ] = False,
) -> str | None:
    """Build the selected cells and record them in the ledger: the summary is said as soon as they are built, the
    commands to run next returned. `dry_run`: the exact docker commands and tags, touching nothing, under the disk
    estimate. No cell flag is refused (exit 2) unless `all_`; a selection whose estimated peak exceeds the data
    root's free space too, before anything is made, unless `no_space_check`."""
    chosen = select_cells(project, cells)
    secrets = Secrets.from_flags(ca_bundle, netrc)
    parallel = jobs_from_flags(jobs, cache_from, cache_to)
    plans = plan_cells(project, chosen, mirror, secrets, base_registry, resolve_bases=False, apt_from=apt_from)
    whole_matrix_problems(cells, all_, chosen)  # after the flags' own checks, which name what they refuse first
    if dry_run:
        space = space_of(chosen)
        warning = f"# warning: {space.shortfall()}; without --dry-run this build is refused\n" if space.short else ""
        return f"# disk: {space.estimate()}\n{warning}\n" + "\n\n".join(each.describe() for each in plans)
    engine(project.root, no_engine_setup)  # installs skopeo too, which asks a base registry for digests
    refused = cache_export_problem(builder_driver(RUNNER), cache_to) if parallel > 1 else None
    if refused:
        raise Failed(refused, code=2)
    space = space_of(chosen)
    if space.short and not no_space_check:
        selected = "--all" if all_ else flags_text(cells.selection())
        raise InputError([Problem(f"{selected} ({space.count})", space.shortfall())])
    say(f"disk: {space.estimate()}" + (f"\nwarning: {space.shortfall()}" if space.short else ""))
    plans = plan_cells(project, chosen, mirror, secrets, base_registry, apt_from=apt_from)  # with the bases' digests
    make_local_bases(project, local_bases(plans), apt_from)
    fetch_debs(project.root, plans)
    try:
        remedies = Remedies.from_matrix(project.matrix, project.expansion.cells)
        results = run_builds(
            plans,
            project.root,
            keep_going=keep_going,
            bake_jobs=parallel if parallel > 1 else 0,
            remedies=remedies,
            cache_from=[cache_from] if cache_from else [],
            cache_to=[cache_to] if cache_to else [],
        )
    except KeyboardInterrupt:
        raise Failed(
            "interrupted: the cell being built was not tagged; earlier cells keep their tags", code=130
        ) from None
    say("\n" + summary_table(results, chosen))
    Ledger(project.root).record(results)
    after = None
    if any(result.ok for result in results):  # the line to run what was built, with GPUs where this engine has them
        after = "\n" + next_commands(results, gpus=probe_container_runtime(RUNNER) is not False)
    if not all_built(results, chosen):
        raise Failed(output=after)
    return after


def bake(
    project: Project,
    *,
    cells: CellFlags = ANY_CELL,
    mirror: Mirror = "none",
    base_registry: BaseRegistry = None,
    ca_bundle: CaBundle = None,
    netrc: Netrc = None,
    cache_from: Annotated[
        str | None,
        Help("add this cache import to every target, e.g. type=registry,ref=HOST/NAME:cache", "CACHE"),
    ] = None,
    cache_to: Annotated[
        str | None, Help("add this cache export to every target (not on the docker driver but type=inline)", "CACHE")
    ] = None,
    out: Annotated[
        str,
        Help(
            f"the bake file to write (default {BAKE_FILE}; its paths are relative to the repository root): a new "
            f"file, one `{usage.BAKE}` wrote, or any under .work/; never a file git tracks",
            "FILE",
        ),
    ] = BAKE_FILE,
    apt_from: AptFrom = None,
) -> str:
    """Write the bake file `out` with the selected cells' builds (their notes said first); what to run next."""
    chosen = select_cells(project, cells)
    secrets = Secrets.from_flags(ca_bundle, netrc)
    problems = cache_problems("--cache-from", cache_from) + cache_problems("--cache-to", cache_to)
    problems += out_problems(out, project.root, RUNNER)
    if problems:
        raise InputError(problems)
    plans = plan_cells(project, chosen, mirror, secrets, base_registry, resolve_bases=False, apt_from=apt_from)
    fetch_debs(project.root, plans)
    for each in plans:
        for line in (*each.mirror.notes, *each.notes):
            say(f"note ({each.cell.slug}): {line}")
    document = bake_document(
        plans, cache_from=[cache_from] if cache_from else [], cache_to=[cache_to] if cache_to else []
    )
    write_bake(out, document)
    return f"{out}: {len(plans)} target(s); from here, `docker buildx bake --file {shlex.quote(out)}` builds them"


def repro(
    project: Project,
    *,
    cells: CellFlags = ANY_CELL,
    against: Annotated[
        str | None,
        Help(
            "compare one cold build with this image, not two: local, or REGISTRY/IMAGE@sha256:<64 hex> to pull",
            "IMAGE",
        ),
    ] = None,
    dockerfile: Annotated[
        str | None,
        Help("check any Dockerfile instead of a cell (built with the cells' reproducibility settings)", "FILE"),
    ] = None,
    context: Annotated[
        str | None, Help("the build context for --dockerfile (default: the Dockerfile's folder)", "FOLDER")
    ] = None,
    mirror: Mirror | None = None,  # None, not "none": --dockerfile refuses a --mirror given, even `--mirror none`
    base_registry: BaseRegistry = None,
    ca_bundle: CaBundle = None,
    no_engine_setup: NoEngineSetup = False,
    apt_from: AptFrom = None,
) -> str:
    """Build each selected cell (or `dockerfile`) cold twice, or once `against` an image (local, or pulled by its
    digest), and report every difference; Failed (exit 1, the report printed) unless all are reproducible."""
    given = cells.given() | {"--mirror": mirror, "--base-registry": base_registry, "--ca-bundle": ca_bundle}
    problems = proof.flag_problems(dockerfile, context, against, given)
    if problems:
        raise InputError(problems)
    profile = "none" if mirror is None else mirror
    workdir = run_folder()
    if dockerfile is not None:
        argv = proof.dockerfile_build(*proof.dockerfile_flags(dockerfile, context))
        engine(project.root, no_engine_setup)
        check_against(against)
        builds, dirty = [(dockerfile, argv)], False
    else:
        chosen = select_cells(project, cells)
        secrets = Secrets.from_flags(ca_bundle, None)
        plan_cells(project, chosen, profile, secrets, base_registry, resolve_bases=False, apt_from=apt_from)
        engine(project.root, no_engine_setup)
        check_against(against)
        plans = plan_cells(project, chosen, profile, secrets, base_registry, apt_from=apt_from)
        make_local_bases(project, local_bases(plans), apt_from)
        fetch_debs(project.root, plans)
        builds = [(each.cell.slug, each.build) for each in plans]
        dirty = any(each.build_arg("REVISION").endswith("-dirty") for each in plans)
    outcomes = [
        proof.reproduce(name, argv, project.root, RUNNER, workdir, against=against, dirty=dirty)
        for name, argv in builds
    ]
    report = "\n" + "\n".join(outcome.report() for outcome in outcomes)
    if not all(outcome.reproducible for outcome in outcomes):
        raise Failed(output=report)
    return report


def whole_matrix_problems(cells: CellFlags, all_: bool, selected: Sequence[Cell]) -> None:
    """InputError (exit 2) for a build with no cell flag and no --all, which would build every release (the
    `selected` cells), and for --all with cell flags."""
    count = len(selected)
    given = [flag for flag, value in cells.given().items() if value is not None]
    if all_ and given:
        raise InputError([Problem("--all", f"given with {', '.join(given)}", "--all alone, or cell flags without it")])
    if not (all_ or given):
        said = (
            f"none given: `{usage.BUILD}` alone would build {count} cells, every release at its image's default "
            f"Python and flavor, about {disk.gb(disk.peak_need(selected))} at the peak of cold builds"
        )
        allowed = (
            f"cell flags (--cuda, --torch or --tf, --python, --flavor: `{usage.MATRIX}` lists the cells, "
            f"`{usage.MATRIX} --here` those this machine can build), or --all for those {count}"
        )
        raise InputError([Problem("cell flags", said, allowed)])


def space_of(cells: Sequence[Cell]) -> disk.Space:
    """The cells' estimated peak against the engine's data root (whose store doubles it or not)."""
    root = disk.data_root(RUNNER)
    store = image_store(RUNNER) if root is not None and root.free is not None else CLASSIC
    return disk.Space(len(cells), disk.peak_need(cells, store), root, store)


def check_against(against: str | None) -> None:
    """InputError (exit 2) for an --against the engine cannot have: no local image and no digest to pull."""
    problems = proof.against_problems(against, RUNNER)
    if problems:
        raise InputError(problems)


def select_cells(project: Project, cells: CellFlags) -> list[Cell]:
    """The cells the flags select; a flag left out takes the image's default (its Python, its flavor)."""
    return select(project.matrix, project.expansion, cells.selection())


def plan_cells(
    project: Project,
    cells: list[Cell],
    mirror: str,
    secrets: Secrets,
    base_registry: str | None,
    *,
    resolve_bases: bool = True,
    apt_from: str | None = None,
) -> list[BuildPlan]:
    """The builds of the cells. Planned twice by a run: first with `resolve_bases` off, which checks every flag
    before an engine is started (and is what a dry run shows), then, with the engine up, asking the registries
    for the base digests the bases lock lacks."""
    try:
        return plan_run(
            project.root,
            project.matrix,
            cells,
            mirror,
            secrets,
            RUNNER,
            workdir=run_folder(),
            base_registry=base_registry,
            resolve_bases=resolve_bases,
            apt_from=apt_from,
        )
    except basesource.BaseUnavailable as error:
        said = bases_unavailable(error.failed, project.matrix, project.expansion.cells, mirror)
        raise Failed(said, code=1) from None


def fetch_debs(root: Path, plans: list[BuildPlan]) -> None:
    """The locked OS packages of every plan, fetched and checked into their flat repositories before any build
    starts: a file that cannot be had, or differs from its lock, stops the run (exit 1) naming the package, and no
    build runs, so no tag moves. uv is staged too where a plan's locked steps run it (stage_uv)."""
    if any(each.uv for each in plans):
        stage_uv(root)
    for each in plans:
        if each.apt is not None and not (root / each.apt.folder / "Packages").is_file():
            debs, where = len(each.apt.lock.debs), each.apt.origin.describe()
            say(f"{each.cell.slug}: fetching the {debs} packages of its apt.lock from {where}")
        try:
            if each.apt is not None:
                aptdebs.flat_repo(each.apt.lock, each.apt.origin, root, RUNNER)
        except aptdebs.FetchError as error:
            raise Failed(f"error: {each.cell.slug}'s OS packages:\n{error}", code=1) from None


def stage_uv(root: Path) -> Path:
    """The project's pinned uv (the `uv` wheel's binary, which `invoke lock` runs too) as UV_CONTEXT/uv, the build
    context the locked steps bind it from, never stored in an image; written again only when it differs, and
    atomically, so a build running beside this one never sees half a file."""
    source = Path(find_uv_bin())
    target = root / UV_CONTEXT / "uv"
    if not (target.is_file() and filecmp.cmp(source, target, shallow=False)):
        write_atomic(target, source.read_bytes(), 0o755)  # the build runs it as the image user, not as root
    return target
