"""The commands that read matrix.yaml and write from it, no engine needed: matrix, render, lock and doctor."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from dlimages.artifacts import baseslock, layout, oslock, pythonlock
from dlimages.building.advice import reach
from dlimages.building.basesource import BaseSource
from dlimages.building.mirrors import NoDebianMirror, debian_mirrors
from dlimages.commands.flags import ANY_CELL, REGISTRY, EveryCell, Help
from dlimages.commands.session import Failed, note
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import run_folder
from dlimages.generate import aptlock, aptpulled, lockproof
from dlimages.generate import lock as lock_files
from dlimages.generate.changes import changed_since
from dlimages.generate.project import Project
from dlimages.gpu import probe
from dlimages.model import doctor as node_doctor
from dlimages.model import doctor_text, fleet, gpunode
from dlimages.model.cells import Cell
from dlimages.model.selection import flags_for, select
from dlimages.model.tables import cells_table, exclusions_text

NEEDS_LEGEND = (  # under `invoke matrix`'s table
    f"needs: where a build takes its base (hub: Docker Hub; base: the offline Debian base `{usage.BASE}` makes here "
    "from an apt mirror) and its Python packages (pytorch-index: PyTorch's wheel index, then PyPI; pypi: PyPI "
    f"alone); `{usage.MATRIX} --here` lists the cells whose needs answer from this machine."
)


def matrix(
    project: Project,
    *,
    json_: Annotated[
        bool,
        Help(
            f"print a JSON array, one object per cell (with `flags`, the `{usage.BUILD}` flags of just that cell, "
            "and `needs`, what its build needs from outside)"
        ),
    ] = False,
    explain: Annotated[bool, Help("show every excluded combination and why")] = False,
    since: Annotated[
        str | None,
        Help(
            "only the cells whose inputs (images/ folder, assets, base digests) changed since this commit; "
            "empty, or a commit this clone lacks: every cell (stderr says which)",
            "COMMIT",
        ),
    ] = None,
    here: Annotated[
        bool,
        Help(
            "only the cells whose needs answer from this machine: Docker Hub's registry, PyTorch's index and PyPI "
            "(pip's configured index) are asked at once, a few seconds at most; stderr says what answered"
        ),
    ] = False,
    base_registry: Annotated[
        str | None,
        Help(
            "with --here: ask this registry, HOST[:PORT][/PATH], in place of Docker Hub (as `--base-registry` "
            f"of `{usage.BUILD}`, filled by `{usage.BASES_MIRROR}`)",
            REGISTRY,
        ),
    ] = None,
) -> str:
    """The valid cells (a table, or JSON with each cell's build flags and needs), or every excluded combination and
    why; `since`: only the cells whose inputs changed since that commit (stderr says which); `here`: only those
    whose needs answer from this machine (stderr says what answered), `base_registry` asked for Docker Hub."""
    problems: list[Problem] = []
    if here and explain:
        problems.append(Problem("--here", "lists valid cells, not exclusions", "--here, or --explain, not both"))
    if base_registry is not None and not here:
        said = "is the registry --here asks in place of Docker Hub, and --here is not given"
        problems.append(Problem("--base-registry", said, "--here --base-registry HOST[:PORT][/PATH]"))
    if problems:
        raise InputError(problems)
    if base_registry is not None:
        BaseSource.from_flags(project.matrix, "none", base_registry)  # InputError for a value docker could not use
    expansion = project.expansion
    cells = expansion.cells
    if since is not None:
        changed = changed_since(project.root, cells, since, RUNNER)
        cells = changed.cells
        note(changed.note(len(expansion.cells)))
    if here:
        found = reach.here(cells, base_registry=base_registry)
        cells = found.cells
        for line in found.lines:
            note(f"here: {line}")
    locks = {cell.slug: pythonlock.lock_state(project.root, cell, project.matrix.packages.pip).status for cell in cells}
    if json_:
        extra = {cell.slug: {"flags": flags_for(cell), "bootstrap": cell.bootstrap_base} for cell in cells}
        entries = [
            {"cell": c.slug, **c.as_json(), **extra[c.slug], "lock": locks[c.slug], "needs": list(c.needs)}
            for c in cells
        ]
        return json.dumps(entries, indent=2)
    if explain:
        counts = f"{len(expansion.cells)} valid cells, {len(expansion.excluded)} combinations excluded."
        return f"{exclusions_text(expansion.excluded)}\n\n{counts}"
    unlocked = sum(status != "locked" for status in locks.values())
    return (
        f"{cells_table(cells, locks)}\n\n{len(cells)} valid cells ({unlocked} not locked: pip resolves them at build "
        f"time, so their builds are not reproducible); `{usage.MATRIX_EXPLAIN}` shows the {len(expansion.excluded)} "
        f"excluded.\n{NEEDS_LEGEND}"
    )


def render(
    project: Project, *, check: Annotated[bool, Help("do not write; fail if images/ is stale or hand-edited")] = False
) -> str:
    """Write images/ and the generated docs from matrix.yaml (what changed), or, with `check`, only verify them."""
    if check:
        return f"images/ and the generated docs are up to date ({project.check_rendered()} files)."
    changed, total = project.write_rendered()
    return "\n".join([*changed, f"{len(changed)} of {total} files changed."])


def lock(
    project: Project,
    *,
    cells: EveryCell = ANY_CELL,
    check: Annotated[
        bool, Help("resolve nothing; fail if a lock is stale or broken, or a PyPI-only cell has none")
    ] = False,
    upgrade_package: Annotated[
        Sequence[str] | None,
        Help("let this package move to its newest allowed version (repeatable); others keep their pins", "PACKAGE"),
    ] = None,
    timeout: Annotated[
        str, Help(f"seconds one cell may take to resolve (default {lock_files.RESOLVE_TIMEOUT_S:g})", "SECONDS")
    ] = str(lock_files.RESOLVE_TIMEOUT_S),
    prove: Annotated[
        bool,
        Help("resolve nothing; install each lock on its cell's Python, import the framework (fails if one cannot)"),
    ] = False,
    upgrade_apt: Annotated[
        bool, Help("resolve only the OS package locks (the base's, each cell's apt.lock), to the newest packages")
    ] = False,
) -> str:
    """Resolve the selected cells' package sets into their locks (then render), or, with `check`, judge every lock,
    or, with `prove`, install each selected lock and import its framework; `upgrade_apt`: resolve only the OS
    package locks, taking the archive's newest packages."""
    want = cells.selection()
    chosen = select(project.matrix, project.expansion, want, defaults=False)
    pip = project.matrix.packages.pip
    if prove:
        given = {"--check": check, "--upgrade-package": upgrade_package, "--upgrade-apt": upgrade_apt}
        given["--timeout"] = timeout != str(lock_files.RESOLVE_TIMEOUT_S)
        if unused := [flag for flag, value in given.items() if value]:
            raise InputError([Problem("--prove", f"given with {', '.join(unused)}", "--prove with cell flags only")])
        return _prove(project, chosen)
    if check:
        problems = pythonlock.lock_problems(project.root, project.expansion.cells, pip)
        problems += _os_lock_problems(project)
        if problems:
            raise Failed(InputError(problems, heading="Locks do not match matrix.yaml:").report(), code=1)
        pulled = [cell for cell in project.expansion.cells if not cell.bootstrap_base]
        locked = sum((layout.cell_dir(project.root, cell) / oslock.APT_LOCK).is_file() for cell in pulled)
        bases = ", ".join(map(oslock.base_lock_path, oslock.offline_bases(project.matrix)))
        on_bases = len(project.expansion.cells) - len(pulled)
        return lock_files.summary(project.root, project.expansion.cells, pip) + (
            f"\nOS packages: {bases} and the apt.lock of the {on_bases} cells on those bases up to date; of the "
            f"{len(pulled)} cells on ubuntu and nvidia/cuda bases, {locked} have an apt.lock "
            "(up to date), the others install what their archive serves on the day of the build (their base has no "
            f"digest recorded: `{usage.BASES_LOCK}`, then `{usage.LOCK} --upgrade-apt`, where its registry is "
            "reachable)."
        )
    results: list[lock_files.Resolution] = []
    if not upgrade_apt:
        upgrade, seconds = upgrade_package or (), lock_files.timeout_from_flag(timeout)
        results = lock_files.lock_cells(project.root, chosen, pip, RUNNER, upgrade=upgrade, timeout=seconds)
    os_lines = _lock_os(project, upgrade=upgrade_apt)
    changed, _ = project.write_rendered()
    summary = "\n".join(os_lines) + "\n"
    summary += f"{sum(r.ok for r in results)} of {len(results)} cells locked; render: {len(changed)} files changed."
    if not all(r.ok for r in results):
        raise Failed(output=summary)
    return summary


def _os_cells(project: Project, os: str) -> list[Path]:
    """The folders of the cells whose OS packages are locked with the offline base of `os`: those on that base."""
    cells = project.expansion.cells
    return [layout.cell_dir(project.root, cell) for cell in cells if cell.bootstrap_base and cell.os == os]


def _lock_os(project: Project, *, upgrade: bool) -> list[str]:
    try:
        main, security = debian_mirrors()
    except NoDebianMirror:
        main, security = oslock.DEBIAN_PUBLIC["debian"], oslock.DEBIAN_PUBLIC["debian-security"]
    urls = {"debian": main, "debian-security": security}
    packages = sorted(project.matrix.packages.apt)
    recorded = baseslock.BaseLock.load(project.root / baseslock.LOCK_FILE)
    lines = []
    for os, distro in oslock.offline_bases(project.matrix).items():
        folders = _os_cells(project, os)
        try:
            lines += aptlock.lock_os(project.root, distro, folders, packages, urls, RUNNER, upgrade=upgrade)
        except aptlock.ResolveError as error:
            raise Failed(f"error: the OS package locks of {os}: {error}", code=1) from None
    cells = project.expansion.cells
    return lines + aptpulled.lock_pulled(project.root, cells, packages, recorded, RUNNER, upgrade=upgrade)


def _os_lock_problems(project: Project) -> list[Problem]:
    packages = sorted(project.matrix.packages.apt)
    run = f"run `{usage.LOCK} --upgrade-apt`"
    problems = []
    for os, distro in oslock.offline_bases(project.matrix).items():
        base = project.root / oslock.base_lock_path(os)
        for path, wanted in [(base, None), *((c / oslock.APT_LOCK, packages) for c in _os_cells(project, os))]:
            why = oslock.stale(project.root, path, wanted, distro)
            if why:
                problems.append(Problem(str(path.relative_to(project.root)), f"the OS package lock is {why}; {run}"))
    recorded = baseslock.BaseLock.load(project.root / baseslock.LOCK_FILE)
    return problems + aptpulled.pulled_problems(project.root, project.expansion.cells, packages, recorded)


def _prove(project: Project, chosen: Sequence[Cell]) -> str:
    states = [pythonlock.lock_state(project.root, cell, project.matrix.packages.pip) for cell in chosen]
    stale = [s.cell.slug for s in states if s.status in ("stale", "broken")]
    if stale:
        raise Failed(f"error: stale locks ({', '.join(stale)}): run `{usage.LOCK}` for them first", code=1)
    locked = [s.cell for s in states if s.status == "locked"]
    if not locked:
        said = f"none of the {len(chosen)} selected cells has a lock to prove (none could be locked from here)"
        raise InputError([Problem("--prove", said, "cell flags that select a locked cell (`invoke matrix`: lock)")])
    proofs = lockproof.prove_cells(project.root, locked, RUNNER, run_folder())
    failed = [p for p in proofs if not p.ok]
    summary = f"{len(proofs) - len(failed)} of {len(proofs)} locked cells import their framework from their lock"
    if failed:
        raise Failed(summary + "; failed: " + ", ".join(p.cell.slug for p in failed), code=1)
    return summary + "."


def doctor(
    project: Project,
    *,
    gpu: Annotated[
        str | None,
        Help(
            "GPU model(s) or architecture(s) of the node, e.g. H100, 'RTX 4090,L40S', GB200, sm_90, 8.6,9.0", "GPU,..."
        ),
    ] = None,
    driver: Annotated[
        str | None,
        Help(
            "NVIDIA driver of that node (with --gpu): a version, e.g. 535.104.05, or a branch such as R580",
            "VERSION|BRANCH",
        ),
    ] = None,
    brand: Annotated[
        str | None,
        Help(
            "GPU brand(s) as the container toolkit names them: tesla or nvidia (data-center), geforce, quadro, "
            "nvidiartx, ...; one for all or one each (default: read on this host; for --gpu: not data-center)"
        ),
    ] = None,
    toolkit: Annotated[
        str | None,
        Help(
            "the node's NVIDIA container toolkit version, e.g. 1.17.8, or none (default: read on this host)", "VERSION"
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        Help(
            "judge a fleet: a YAML/JSON list of {name, gpu, driver[, brand, toolkit, cpu]} or `kubectl get nodes "
            "-o json` (GPU Feature Discovery's labels); a node-by-image table",
            "FILE",
        ),
    ] = None,
    json_: Annotated[
        bool,
        Help(
            f"print a JSON array: each cell as `{usage.MATRIX_JSON}` gives it, plus runs, runs_through, reasons, "
            "needs_driver and run_notes"
        ),
    ] = False,
) -> str:
    """Which cells run on this GPU node (or the one `gpu` and `driver` describe, or on each node of the fleet file
    `nodes`), and how: a report or JSON."""
    if nodes is not None:
        given = [f"--{name}" for name, value in (("gpu", gpu), ("driver", driver), ("brand", brand)) if value]
        if given:
            said = f"describes the nodes itself: {', '.join(given)} cannot be given with it"
            raise InputError([Problem("--nodes", said, f"--nodes FILE alone ({fleet.NODES_ALLOWED})")])
        try:
            text = Path(nodes).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InputError([Problem("--nodes", f"cannot read {nodes!r} ({error})", fleet.NODES_ALLOWED)]) from None
        found = fleet.read_fleet(text, nodes)
        cells = project.expansion.cells
        return json.dumps(fleet.fleet_rows(cells, found), indent=2) if json_ else fleet.fleet_table(cells, found)
    node = gpunode.node_from_flags(gpu, driver, probe.probe_host, brand, toolkit)
    rows = node_doctor.report(project.expansion.cells, node)
    return json.dumps(rows, indent=2) if json_ else doctor_text.format_report(rows, node)
