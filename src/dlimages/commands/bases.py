"""The commands about base images: make the offline Debian bases (base), list and pin the bases the cells pull
(bases_list), copy them into a registry of one's own (bases_mirror)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from typing import Annotated

from dlimages.artifacts import baseslock, layout, oslock
from dlimages.building import aptdebs, basesource
from dlimages.building.base import BaseFailed, base_lock, load, make_base_argv, missing_bases
from dlimages.commands.flags import ANY_CELL, REGISTRY, AptFrom, EveryCell, Help, NoEngineSetup
from dlimages.commands.session import Failed, engine, say
from dlimages.core import usage
from dlimages.core.engines import Need
from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.outputs import output_folder
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import run_folder
from dlimages.generate import baselock, baserequire
from dlimages.generate.project import Project
from dlimages.gpu import inimage
from dlimages.model.selection import select


def base(
    project: Project,
    *,
    os: Annotated[
        str | None,
        Help("make only this OS's base (matrix.yaml's name, e.g. debian13; default: each OS with `bootstrap`)"),
    ] = None,
    apt_from: AptFrom = None,
    check: Annotated[
        bool, Help("build the tarball twice and fail unless both, and the image IDs, are identical")
    ] = False,
    no_engine_setup: NoEngineSetup = False,
) -> None:
    """Make each offline Debian base (matrix.yaml's OSes with `bootstrap`; `os`: that one only) from its lock with
    scripts/make-base.sh (its output shown as it runs): the lock's packages fetched and checked first, from `apt_from`
    (aptdebs.origin) or this host's mirror."""
    bases = oslock.offline_bases(project.matrix)
    if os is not None and os not in bases:
        raise InputError([Problem("--os", f"{os!r} has no base made here", allowed_list(bases))])
    sources = {name: base_lock(project.root, bases[name], apt_from) for name in ([os] if os else bases)}
    engine(project.root, no_engine_setup, need=Need.BASE)
    for name, source in sources.items():
        say(f"{oslock.base_lock_path(name)}: {len(source.lock.debs)} packages, from {source.origin.describe()}")
        try:
            repo = aptdebs.flat_repo(source.lock, source.origin, project.root, RUNNER)
        except aptdebs.FetchError as error:
            raise Failed(f"error: the packages of the {name} base:\n{error}", code=1) from None
        image = project.matrix.os[name].image
        code = RUNNER.stream(make_base_argv(project.root, repo, source.lock, check=check), say)
        if code:
            raise Failed(f"error: scripts/make-base.sh exited {code} making {image}", code=1)
        try:
            for line in load(project.root, source.lock, image, RUNNER):
                say(line)
        except BaseFailed as error:
            raise Failed(f"error: {error}", code=1) from None


def make_local_bases(project: Project, images: list[str], apt_from: str | None = None) -> None:
    """Make the bases made here that the engine lacks or has from another lock (with `base`, which needs root),
    before a build uses them."""
    made = {project.matrix.os[name].image: name for name in oslock.offline_bases(project.matrix)}
    locks = {image: oslock.read(project.root / oslock.base_lock_path(name)) for image, name in made.items()}
    for image in missing_bases(images, RUNNER, {image: lock for image, lock in locks.items() if lock is not None}):
        if os.geteuid() != 0:  # mmdebstrap --mode=root: the one step of a build that needs root, once per engine
            raise Failed(
                f"error: {image} is missing or from another lock; making it needs root, once: {usage.BASE_AS_ROOT}",
                code=1,
            )
        print(f"{image} is missing or made from another lock: making it with `{usage.BASE}`")
        base(project, os=made[image], apt_from=apt_from, check=False, no_engine_setup=True)


def bases_list(
    project: Project,
    *,
    cells: EveryCell = ANY_CELL,
    lock: Annotated[
        bool,
        Help("ask each registry for the digest every base tag names now and record it in images/bases.lock.json"),
    ] = False,
) -> str | None:
    """Each base the selected cells pull and the digest builds pin it to; with `lock`, ask the registries for the
    digests now and record them."""
    chosen = select(project.matrix, project.expansion, cells.selection(), defaults=False)
    path = project.root / baseslock.LOCK_FILE
    recorded = baseslock.BaseLock.load(path)
    refs = baseslock.pulled_bases(chosen)
    if not lock:
        unpinned = "no recorded digest: pulled by tag (not reproducible)"
        return "\n".join(f"{ref} -> {recorded.pinned(ref) or unpinned}" for ref in refs) or None
    recorded, results = baselock.refresh(recorded, refs, RUNNER)
    recorded.write(path)
    lines = [f"{'recorded' if result.ok else 'NOT recorded'} {result}" for result in results]
    lines.append(f"{baseslock.LOCK_FILE}: {sum(r.ok for r in results)} of {len(results)} bases recorded now.")
    stale = baserequire.stale_records(project.matrix, chosen, recorded, RUNNER)  # the bases' own requirements
    lines += stale
    if stale or not all(r.ok for r in results):
        raise Failed(output="\n".join(lines))
    return "\n".join(lines)


def bases_mirror(
    project: Project,
    *,
    to: Annotated[
        str | None, Help("the registry to copy into; builds then take bases from it with --base-registry", REGISTRY)
    ] = None,
    cells: EveryCell = ANY_CELL,
    image: Annotated[
        Sequence[str] | None,
        Help("also copy this image (repeatable): a local one from this engine, else from its registry"),
    ] = None,
    dry_run: Annotated[bool, Help("print the skopeo commands; copy nothing")] = False,
    no_engine_setup: NoEngineSetup = False,
) -> str:
    """Copy every base the selected cells use (and `image`) into the registry `to` with skopeo, by digest; with
    `dry_run`, only the commands."""
    if not to:
        raise InputError([Problem("--to", "give the registry to copy into", "HOST[:PORT][/PATH]")])
    chosen = select(project.matrix, project.expansion, cells.selection(), defaults=False)
    extra = inimage.check_images(image or [])
    lock = baseslock.BaseLock.load(project.root / baseslock.LOCK_FILE)
    # Every problem is exit 2 before the engine starts.
    basesource.mirror_copies(chosen, to, lock, extra, local=lambda _: False)
    if not dry_run:
        engine(project.root, no_engine_setup, need=Need.DOCKER)
        make_local_bases(project, [cell.base_image for cell in chosen if cell.bootstrap_base])
    copies = basesource.mirror_copies(chosen, to, lock, extra, local=RUNNER.image_exists)
    workdir = run_folder()
    if dry_run:
        return "\n".join(shlex.join(argv) for item in copies for argv in item.commands(workdir))
    results = []
    for number, item in enumerate(copies, start=1):
        say(f"[{number}/{len(copies)}] {item.source} -> {item.destination}")
        results.append(basesource.copy(item, RUNNER, workdir, say))
        say(str(results[-1]))
    summary = f"{sum(r.ok for r in results)} of {len(results)} images copied to {to}; build with --base-registry {to}"
    if not all(r.ok for r in results):
        raise Failed(output=summary)
    return summary


def apt_repo(
    project: Project,
    *,
    to: Annotated[str | None, Help("the folder to copy into (made if missing)", "FOLDER")] = None,
    apt_from: AptFrom = None,
) -> str:
    """Copy the locked .deb files of the offline bases and of every cell into the folder `to`, checked: a repository
    that holds only them, for `--apt-from` (offline and air-gapped builds, and builds after the archive has moved
    on)."""
    folder = output_folder(to, "--to", project.root, command=usage.APT_REPO, marker="Release", runner=RUNNER)
    bases = [base_lock(project.root, distro, apt_from) for distro in oslock.offline_bases(project.matrix).values()]
    paths = [layout.cell_dir(project.root, cell) / oslock.APT_LOCK for cell in project.expansion.cells]
    cells = {lock.digest(): lock for lock in filter(None, map(oslock.read, paths))}
    sources = [*bases]
    for lock in cells.values():
        distro = oslock.distro_of(lock)
        mirrors = aptdebs.host_mirrors() if distro.family == "debian" else None  # the host's Debian mirror
        sources.append(aptdebs.AptDebsSource(lock, aptdebs.origin(apt_from, lock.resolved, mirrors, distro)))
    try:
        count = aptdebs.export(sources, folder, project.root, RUNNER)
    except aptdebs.FetchError as error:
        raise Failed(f"error: {error}", code=1) from None
    where = bases[0].origin.describe() if bases else "their archives"
    return (
        f"{to}: {count} packages of {len(sources)} locks, from {where}; build from it with "
        f"`{usage.BUILD} --apt-from {shlex.quote(str(to))}` (or serve the folder over HTTP: --apt-from URL)"
    )
