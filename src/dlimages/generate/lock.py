"""Resolving each cell's Python lock with uv, for the cell's Python and Linux platform, bounded by a timeout; the
lock's format, paths and staleness are dlimages.artifacts.pythonlock's."""

from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.layout import cell_dir
from dlimages.artifacts.pythonlock import (
    LOCK,
    LOCK_FILES,
    LockInput,
    lock_files,
    lock_input,
    lock_state,
    parse_compiled,
    requirement_name,
)
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.grammar import PROJECT_NAME_ALLOWED, project_name_problem
from dlimages.core.runner import Result, Runner
from dlimages.model.cells import Cell

RESOLVE_TIMEOUT_S = 300.0  # TF 2.4.4 with its pinned data stack on Python 3.8: 17 s here; pip alone never ended


# --- resolving ----------------------------------------------------------------------------------------------


def compile_argv(lock: LockInput, requirements: Path, output: Path, upgrade: Sequence[str] = ()) -> list[str]:
    """uv's command for the cell: its Python and platform, wheels only, hashes, no host configuration.

    `output` may hold the previous lock: uv keeps its versions unless `upgrade` names the package."""
    argv = ["uv", "pip", "compile", str(requirements), "--output-file", str(output), "--no-config", "--quiet"]
    argv += ["--python-version", lock.python, "--python-platform", lock.platform]
    argv += ["--generate-hashes", "--only-binary", ":all:", "--no-header", "--annotation-style", "split"]
    # The system's CA store: behind a TLS-intercepting proxy uv's bundled roots are not enough. The index is uv's
    # default, PyPI (or what UV_DEFAULT_INDEX names: a true mirror serves the same files, so the same hashes).
    argv += ["--native-tls"]
    if lock.extra_index_url:
        # uv asks the extra index first and, with `first-index`, takes every package it has from it alone: the
        # `--index-url` semantics PyTorch documents, so a package of the same name on PyPI can never win. Named
        # here, so that UV_INDEX_STRATEGY cannot turn it into pip's best-version-of-any-index.
        argv += ["--extra-index-url", lock.extra_index_url, "--index-strategy", "first-index"]
    if lock.find_links:
        argv += ["--find-links", lock.find_links]
    for name in lock.source_builds:
        argv += ["--no-binary", name]
    for name in upgrade:
        argv += ["--upgrade-package", name]
    return argv


@dataclass(frozen=True)
class Resolution:
    cell: Cell
    files: Mapping[str, str]  # empty when it failed
    problem: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problem


def uv_version(runner: Runner) -> str | None:
    done = runner(["uv", "--version"], timeout=30)
    words = done.out.split()
    return " ".join(words[:2]) if done.ok and words[:1] == ["uv"] and len(words) > 1 else None


def resolve(
    root: Path,
    cell: Cell,
    pip_version: str,
    runner: Runner,
    *,
    uv: str,
    upgrade: Sequence[str] = (),
    timeout: float = RESOLVE_TIMEOUT_S,
) -> Resolution:
    """Resolve one cell (bounded by `timeout`): the lock's files, or why not, in uv's words."""
    lock = lock_input(cell, pip_version)
    previous = cell_dir(root, cell) / LOCK
    with tempfile.TemporaryDirectory(prefix="dlimages-lock-") as scratch:
        requirements, output = Path(scratch) / "requirements.in", Path(scratch) / LOCK
        requirements.write_text(lock.text(), encoding="utf-8")
        if previous.is_file():
            output.write_bytes(previous.read_bytes())  # uv keeps the locked versions it can
        # Relative names, run in the scratch folder: uv writes the input's name into the lock (`# via -r ...`).
        argv = compile_argv(lock, Path(requirements.name), Path(output.name), upgrade)
        done = runner(argv, timeout=timeout, cwd=Path(scratch))
        if not done.ok:
            return Resolution(cell, {}, _failure(done, lock, timeout))
        pins = parse_compiled(output.read_text(encoding="utf-8"))
    names = {pin.name for pin in pins}
    missing = [r for r in (requirement_name(q) for q in lock.requirements) if r not in names]
    if missing:
        return Resolution(cell, {}, f"uv's output lacks {', '.join(missing)} (a uv version this code does not read?)")
    return Resolution(cell, lock_files(cell, lock, pins, uv))


def _failure(done: Result, lock: LockInput, timeout: float) -> str:
    if done.missing:
        return "uv is not installed (it comes with this project: `pip install -e .`)"
    if done.hung:
        return (
            f"did not resolve within {timeout:g} s (stopped); the requirements were: {', '.join(lock.requirements)}. "
            "Relax a pin in matrix.yaml (packages.overrides) or raise --timeout"
        )
    lines = [line for line in (done.err or done.out).splitlines() if line.strip()]
    shown = lines[:40] + ([f"... {len(lines) - 40} more lines"] if len(lines) > 40 else [])
    return "uv could not resolve the set:\n" + "\n".join(f"    {line}" for line in shown)


def write_lock(root: Path, resolution: Resolution) -> None:
    """The lock's files, each atomically; pip.lock last, so an interrupted write reads as stale or broken."""
    folder = cell_dir(root, resolution.cell)
    for name in LOCK_FILES:  # pip.lock last
        write_atomic(folder / name, resolution.files[name])


_SECONDS = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,3})?")  # ASCII: float() also reads '\uff13\uff10', ' 30', '1e3', 'inf'


def timeout_from_flag(value: str) -> float:
    """--timeout's seconds: a positive number up to a day (InputError otherwise)."""
    seconds = float(value) if _SECONDS.fullmatch(value) else -1.0
    if not 0 < seconds <= 86400:
        raise InputError([Problem("--timeout", f"{value[:40]!r} is not a number of seconds", "1 to 86400")])
    return seconds


def lock_cells(
    root: Path,
    cells: Sequence[Cell],
    pip_version: str,
    runner: Runner,
    *,
    upgrade: Sequence[str] = (),
    timeout: float = RESOLVE_TIMEOUT_S,
    say: Callable[[str], None] = print,
) -> list[Resolution]:
    """Resolve and write each cell's lock, one after another, saying how each went; a failed cell keeps its old
    lock (if any) and the others go on."""
    problems = [
        Problem("--upgrade-package", f"{name[:40]!r} {problem}", PROJECT_NAME_ALLOWED)
        for name in upgrade
        if (problem := project_name_problem(name)) is not None
    ]
    if problems:
        raise InputError(problems)
    uv = uv_version(runner)
    if uv is None:
        raise InputError([Problem("uv", "not found on PATH", "the uv `pip install -e .` installs (pyproject.toml)")])
    results: list[Resolution] = []
    for cell in cells:
        start = time.monotonic()
        resolution = resolve(root, cell, pip_version, runner, uv=uv, upgrade=upgrade, timeout=timeout)
        resolution = dataclasses.replace(resolution, seconds=time.monotonic() - start)
        if resolution.ok:
            write_lock(root, resolution)
            pins = len(parse_compiled(resolution.files[LOCK]))
            say(f"locked {cell.slug}: {pins} packages in {resolution.seconds:.1f} s")
        else:
            say(f"NOT locked {cell.slug} ({resolution.seconds:.1f} s): {resolution.problem}")
        results.append(resolution)
    return results


def summary(root: Path, cells: Iterable[Cell], pip_version: str) -> str:
    """One line for `invoke lock --check`: how many cells are locked, and which are not (and why that is allowed)."""
    states = [lock_state(root, cell, pip_version) for cell in cells]
    locked = [s for s in states if s.status == "locked"]
    unlocked = [s.cell.slug for s in states if s.status == "unlocked"]
    text = f"{len(locked)} cells locked and up to date"
    if unlocked:
        text += (
            f"; {len(unlocked)} unlocked (their CUDA builds are on an index not reachable when locking; "
            f"their builds say they are not reproducible): {', '.join(unlocked)}"
        )
    return text + "."
