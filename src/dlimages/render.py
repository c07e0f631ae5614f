"""Render every cell's Dockerfile (and the assets images copy) into images/, deterministically."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from dlimages.cells import Cell, Expansion
from dlimages.errors import InputError, Problem, allowed_list
from dlimages.selection import flags_for
from dlimages.spec import MATRIX_FILE, Matrix

IMAGES_DIR = "images"
TEMPLATES_DIR = "templates"
EXECUTABLE = 0o755
REGULAR = 0o644


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to the repo root
    content: bytes
    mode: int = REGULAR


def _assets(root: Path) -> list[GeneratedFile]:
    """Files every image copies: the templates' assets and the in-image commands from the package."""
    source = root / TEMPLATES_DIR / "assets"
    files = [
        GeneratedFile(
            f"{IMAGES_DIR}/assets/{path.name}", path.read_bytes(), EXECUTABLE if os.access(path, os.X_OK) else REGULAR
        )
        for path in sorted(source.iterdir())
        if path.is_file()
    ]
    payload = resources.files("dlimages") / "payload"
    for command, module in (("dl-smoke", "dl_smoke.py"), ("dl-bench", "dl_bench.py")):
        script = payload / module
        if script.is_file():
            files.append(GeneratedFile(f"{IMAGES_DIR}/assets/{command}", script.read_bytes(), EXECUTABLE))
    # What both commands import; beside them in /usr/local/bin, the first place a script's imports look.
    shared = payload / "dl_stack.py"
    files.append(GeneratedFile(f"{IMAGES_DIR}/assets/dl_stack.py", shared.read_bytes(), REGULAR))
    return files


def environment(root: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(root / TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - Dockerfiles, not HTML
    )


def check_partials(root: Path, matrix: Matrix) -> None:
    available = sorted(p.stem for p in (root / TEMPLATES_DIR / "partials").glob("*.j2"))
    problems = [
        Problem(f"{MATRIX_FILE}: partials[{i}]", f"no template templates/partials/{name}.j2", allowed_list(available))
        for i, name in enumerate(matrix.partials)
        if name not in available
    ]
    if problems:
        raise InputError(problems)


def render_cell(env: jinja2.Environment, matrix: Matrix, cell: Cell) -> str:
    template = env.get_template("Dockerfile.j2")
    text = template.render(
        cell=cell,
        cell_json=cell.as_json(),
        build_flags=flags_for(cell),
        partials=matrix.partials,
        apt_packages=sorted(matrix.packages.apt),
        pip_version=matrix.packages.pip,
    )
    # Blank-line runs come from template control flow, not meaning: collapse them for stable output.
    lines: list[str] = []
    for line in text.splitlines():
        if line.strip() or (lines and lines[-1].strip()):
            lines.append(line.rstrip())
    return "\n".join(lines).rstrip() + "\n"


def render_tree(root: Path, matrix: Matrix, expansion: Expansion) -> list[GeneratedFile]:
    """Everything under images/, in memory, so nothing is written unless all of it rendered."""
    check_partials(root, matrix)
    env = environment(root)
    files = _assets(root)
    for cell in expansion.cells:
        base = f"{IMAGES_DIR}/{cell.framework}/{cell.slug}"
        try:
            dockerfile = render_cell(env, matrix, cell)
        except jinja2.TemplateError as error:
            where = f"{TEMPLATES_DIR}/{getattr(error, 'name', None) or 'Dockerfile.j2'}"
            line = getattr(error, "lineno", None)
            raise InputError(
                [Problem(f"{where}:{line}" if line else where, f"{error} (rendering {cell.slug})")]
            ) from None
        files.append(GeneratedFile(f"{base}/Dockerfile", dockerfile.encode()))
        files.append(
            GeneratedFile(f"{base}/cell.json", (json.dumps(cell.as_json(), indent=2, sort_keys=True) + "\n").encode())
        )
    return sorted(files, key=lambda f: f.path)


def _existing(root: Path) -> dict[str, Path]:
    images = root / IMAGES_DIR
    if not images.is_dir():
        return {}
    return {str(p.relative_to(root)): p for p in sorted(images.rglob("*")) if p.is_file()}


def write_tree(root: Path, files: list[GeneratedFile]) -> list[str]:
    """Bring images/ in line with the rendered files; returns what changed, e.g. "wrote X", "removed Y"."""
    changed: list[str] = []
    wanted = {f.path for f in files}
    for generated in files:
        target = root / generated.path
        if target.is_file() and target.read_bytes() == generated.content and _mode(target) == generated.mode:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(generated.content)
        tmp.chmod(generated.mode)
        tmp.replace(target)
        changed.append(f"wrote {generated.path}")
    for path, existing in _existing(root).items():
        if path not in wanted:
            existing.unlink()
            changed.append(f"removed {path}")
    for directory in sorted((root / IMAGES_DIR).rglob("*"), reverse=True):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    return changed


def stale_files(root: Path, files: list[GeneratedFile]) -> list[Problem]:
    """Differences between images/ and a fresh render: stale, hand-edited, missing or extra files."""
    problems: list[Problem] = []
    existing = _existing(root)
    for generated in files:
        target = root / generated.path
        if not target.is_file():
            problems.append(Problem(generated.path, "missing; run `invoke render`"))
        elif target.read_bytes() != generated.content:
            problems.append(
                Problem(generated.path, "differs from its sources (stale or edited by hand); run `invoke render`")
            )
        elif _mode(target) != generated.mode:
            problems.append(
                Problem(generated.path, f"has mode {_mode(target):o}, expected {generated.mode:o}; run `invoke render`")
            )
    wanted = {f.path for f in files}
    problems += [
        Problem(path, "not generated by any cell; run `invoke render` to remove it")
        for path in existing
        if path not in wanted
    ]
    return problems


def _mode(path: Path) -> int:
    return EXECUTABLE if os.access(path, os.X_OK) else REGULAR
