"""Invoke tasks: thin glue over the dlimages package (parse flags, call the package, print).

invoke matrix [--json] [--explain]     the valid cells, or why combinations were excluded
invoke render [--check]                write images/ from matrix.yaml + templates/, or verify it
invoke build --cuda 11.8 --torch 2.1 [--dry-run]
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from invoke import Context, task
from invoke.exceptions import Exit

from dlimages.buildplan import Secrets, default_ca_bundle, plan_build
from dlimages.cells import Selection, select
from dlimages.errors import InputError, Problem
from dlimages.mirrors import resolve
from dlimages.project import Project, find_root
from dlimages.render import render_tree, stale_files, write_tree
from dlimages.tables import cells_table, exclusions_text

F = TypeVar("F", bound=Callable[..., Any])

SELECT_HELP = {
    "cuda": "CUDA version, e.g. 11.8 (default: every CUDA version)",
    "torch": "PyTorch version; partial picks the newest patch, e.g. 2.1 -> 2.1.2",
    "tf": "TensorFlow version; partial picks the newest patch, e.g. 2.14 -> 2.14.1",
    "python": "Python version, e.g. 3.10 (default: the image's default Python where the cell has it)",
    "flavor": "runtime or devel (default: the image's default flavor)",
}


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


def _selection(
    cuda: str | None, torch: str | None, tf: str | None, python: str | None, flavor: str | None
) -> Selection:
    if torch and tf:
        raise InputError([Problem("--torch/--tf", "choose one framework per build", "--torch X or --tf Y")])
    framework = "pytorch" if torch else "tensorflow" if tf else None
    return Selection(cuda=cuda, framework=framework, version=torch or tf, python=python, flavor=flavor)


@task(help={"json": "print a JSON array, one object per cell", "explain": "show every excluded combination and why"})
@reports_input_errors
def matrix(c: Context, json_: bool = False, explain: bool = False) -> None:
    """Show the valid cells of matrix.yaml (or, with --explain, what was excluded and why)."""
    project = _project()
    expansion = project.expansion
    if json_:
        print(json.dumps([cell.as_json() for cell in expansion.cells], indent=2))
    elif explain:
        print(exclusions_text(expansion.excluded))
        print(f"\n{len(expansion.cells)} valid cells, {len(expansion.excluded)} combinations excluded.")
    else:
        print(cells_table(expansion.cells))
        print(
            f"\n{len(expansion.cells)} valid cells; "
            f"`invoke matrix --explain` shows the {len(expansion.excluded)} excluded."
        )


@task(help={"check": "do not write; fail if images/ is stale or hand-edited"})
@reports_input_errors
def render(c: Context, check: bool = False) -> None:
    """Render every cell's Dockerfile into images/ (deterministic; nothing written if validation fails)."""
    project = _project()
    files = render_tree(project.root, project.matrix, project.expansion)
    if check:
        problems = stale_files(project.root, files)
        if problems:
            raise InputError(problems, heading=f"images/ is out of date ({len(problems)} files):")
        print(f"images/ is up to date ({len(files)} files).")
        return
    changed = write_tree(project.root, files)
    for path in changed:
        print(f"wrote {path}")
    print(f"{len(changed)} of {len(files)} files changed.")


@task(
    help={
        **SELECT_HELP,
        "mirror": "mirror profile: none, tuna, aliyun, ustc (matrix.yaml) or host (this machine's apt mirror)",
        "dry_run": "print the exact docker commands and tags; touch nothing",
        "ca_bundle": "extra CA bundle for pip inside the build (a BuildKit secret); default: this host's bundle",
        "netrc": "netrc file with private-index credentials (a BuildKit secret)",
    }
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
    dry_run: bool = False,
    ca_bundle: str | None = None,
    netrc: str | None = None,
) -> None:
    """Build the selected cells (--dry-run prints the commands and tags)."""
    project = _project()
    want = _selection(cuda, torch, tf, python, flavor)
    cells = select(project.matrix, project.expansion, want)
    secrets = Secrets(
        pip_ca=Path(ca_bundle) if ca_bundle else default_ca_bundle(), netrc=Path(netrc) if netrc else None
    )
    problems = [
        Problem(flag, f"no such file: {path}")
        for flag, path in (("--ca-bundle", secrets.pip_ca), ("--netrc", secrets.netrc))
        if path is not None and not path.is_file()
    ]
    if problems:
        raise InputError(problems)
    workdir = Path(tempfile.gettempdir()) / "dlimages"
    plans = [
        plan_build(cell, resolve(project.matrix, mirror, cell), secrets, iidfile=workdir / f"{cell.slug}.iid")
        for cell in cells
    ]
    if dry_run:
        print("\n\n".join(plan.describe() for plan in plans))
        return
    print("Real builds are not wired up yet: use --dry-run to see the commands.", file=sys.stderr)
    raise Exit(code=1)
