"""OS package locks of the cells on pulled bases (`ubuntu`, `nvidia/cuda`): resolved (aptlock.resolve_on) from
their distribution's archive on the packages their base has installed, and only for a base recorded by digest in
images/bases.lock.json: a lock on top of a base that moves means nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from dlimages.artifacts.baseslock import BaseLock
from dlimages.artifacts.layout import cell_dir
from dlimages.artifacts.oslock import APT_LOCK, Distro, read, stale, write
from dlimages.core import usage
from dlimages.core.errors import Problem
from dlimages.core.runner import Runner
from dlimages.generate.aptlock import ResolveError, resolve_on
from dlimages.model.cells import Cell


def _pulled(cells: Iterable[Cell], recorded: BaseLock) -> tuple[dict[tuple[str, str], list[Cell]], set[str]]:
    """The cells on pulled bases, grouped by (OS, base by digest), and the bases without a recorded digest: a lock
    on top of a base means something only for that very base."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    unpinned: set[str] = set()
    for cell in cells:
        if cell.bootstrap_base:
            continue
        ref = recorded.pinned(cell.base_image)
        if ref is None:
            unpinned.add(cell.base_image)
        else:
            groups.setdefault((cell.os, ref), []).append(cell)
    return groups, unpinned


def lock_pulled(
    root: Path, cells: Iterable[Cell], packages: Sequence[str], recorded: BaseLock, runner: Runner, *, upgrade: bool
) -> list[str]:
    """Resolve and write the apt.lock of the cells on pulled bases recorded by digest, from their distribution's
    archive, on the packages the base has installed (its /var/lib/dpkg/status, read with `docker run`): when one
    is missing or stale, or with `upgrade`. A base that cannot be read or resolved is said, the others go on."""
    groups, unpinned = _pulled(cells, recorded)
    lines = [f"apt not locked on {len(unpinned)} pulled bases with no digest recorded (`{usage.BASES_LOCK}` first)"]
    lines = lines if unpinned else []
    for (os, ref), members in groups.items():
        folders = [cell_dir(root, cell) / APT_LOCK for cell in members]
        if not upgrade and not any(stale(root, path, packages, (os, ref)) for path in folders):
            continue
        first = members[0]
        distro = Distro.of(first.os, first.os_family, first.os_codename)
        done = runner(["docker", "run", "--rm", "--entrypoint", "cat", ref, "/var/lib/dpkg/status"], timeout=1800)
        if not done.ok:
            lines.append(f"NOT locked, the cells on {ref}: cannot read its installed packages: {done.last_line}")
            continue
        try:
            lock = resolve_on(distro, packages, ref, done.out, dict(distro.public), runner)
        except ResolveError as error:
            lines.append(f"NOT locked, the cells on {ref}: {error}")
            continue
        for path in folders:
            old = read(path)
            if old is None or (old.debs, old.input, old.base) != (lock.debs, lock.input, lock.base):
                write(path, lock)
        lines.append(f"{ref}: {len(lock.debs)} packages, for {len(folders)} cells")
    return lines


def pulled_problems(root: Path, cells: Iterable[Cell], packages: Sequence[str], recorded: BaseLock) -> list[Problem]:
    """`lock --check` on the cells on pulled bases: a recorded base whose cells' apt.lock is missing or stale."""
    groups, _ = _pulled(cells, recorded)
    problems = []
    for (os, ref), members in groups.items():
        for cell in members:
            path = cell_dir(root, cell) / APT_LOCK
            why = stale(root, path, packages, (os, ref))
            if why:
                said = f"the OS package lock is {why}; run `{usage.LOCK} --upgrade-apt`"
                problems.append(Problem(str(path.relative_to(root)), said))
    return problems
