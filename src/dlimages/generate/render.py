"""Render every cell's Dockerfile (and the assets images copy) into images/, deterministically.

Everything is rendered in memory and checked (each Dockerfile holds only what the templates write: dockerfile_rules)
before anything is written. Then each file that differs is replaced whole, in place (`generated`): images/ itself is
never moved, and what render does not write (the locks, anything put there by hand) is never rewritten, moved or
removed. Renders (of images/ and of the docs' blocks: docsblocks) take turns on a lock in .work/, so two never
interleave.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib import resources
from pathlib import Path

import jinja2

from dlimages.artifacts.layout import ASSETS, BASES_LOCK, IMAGES_DIR
from dlimages.artifacts.oslock import APT_LOCK, BASE_APT_LOCK
from dlimages.artifacts.pythonlock import COMPILE, LOCK_FILES, install_flags, installs_with_uv, lock_state, uv_install
from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.files import turn
from dlimages.generate.dockerfile_rules import dockerfile_problems
from dlimages.generate.generated import (
    EXECUTABLE,
    STAGED,
    GeneratedFile,
    file_mode,
    remove_staged,
    replace,
    shown,
    stale,
)
from dlimages.generate.templating import TEMPLATES_DIR, environment
from dlimages.model.cells import Cell, Expansion
from dlimages.model.selection import flags_for
from dlimages.model.spec import MATRIX_FILE, Matrix

# The in-image commands, from the package's payload/; its other dl_*.py files are the modules they import, which
# templates/partials/shell.j2 installs beside them.
PAYLOAD_COMMANDS = {"dl_smoke.py": "dl-smoke", "dl_bench.py": "dl-bench"}
CELL_LOCKS = (*LOCK_FILES, APT_LOCK)  # what `invoke lock` writes into a cell's folder; render never touches them
CELL_FILES = ("Dockerfile", "cell.json")  # what render writes into a cell's folder, beside the cell's locks
RENDER_LOCK = ".work/render.lock"  # in the folder git ignores: renders take turns on it (`rendering`)

log = logging.getLogger(__name__)


def _assets(root: Path) -> list[GeneratedFile]:
    """Files every image copies: the templates' assets and the in-image commands from the package."""
    source = root / TEMPLATES_DIR / "assets"
    if not source.is_dir():
        missing = "missing: the folder of files every image copies (dl-entrypoint, zshrc, ...)"
        raise InputError([Problem(f"{TEMPLATES_DIR}/assets", missing)])
    try:
        files = [
            GeneratedFile(f"{IMAGES_DIR}/{ASSETS}/{path.name}", path.read_bytes(), file_mode(path))
            for path in sorted(source.iterdir())
            if path.is_file()
        ]
    except OSError as error:
        raise InputError([Problem(shown(root, error.filename), f"cannot read: {error.strerror}")]) from None
    payload = resources.files("dlimages") / "payload"
    for module in sorted(payload.iterdir(), key=lambda path: path.name):
        if module.name in PAYLOAD_COMMANDS:
            command = PAYLOAD_COMMANDS[module.name]
            files.append(GeneratedFile(f"{IMAGES_DIR}/{ASSETS}/{command}", module.read_bytes(), EXECUTABLE))
        elif module.name.startswith("dl_") and module.name.endswith(".py"):
            # What the commands import: beside them in /usr/local/bin, the first place a script's imports look.
            files.append(GeneratedFile(f"{IMAGES_DIR}/{ASSETS}/{module.name}", module.read_bytes()))
    return files


def check_partials(root: Path, matrix: Matrix) -> None:
    available = sorted(p.stem for p in (root / TEMPLATES_DIR / "partials").glob("*.j2"))
    problems = [
        Problem(f"{MATRIX_FILE}: partials[{i}]", f"no template templates/partials/{name}.j2", allowed_list(available))
        for i, name in enumerate(matrix.partials)
        if name not in available
    ]
    if problems:
        raise InputError(problems)


def render_cell(
    env: jinja2.Environment, matrix: Matrix, cell: Cell, *, locked: bool = False, apt_locked: bool = False
) -> str:
    """The cell's Dockerfile; `locked`: its packages install from the lock beside it (lock.py), not by resolving;
    `apt_locked`: its OS packages from its apt.lock (aptlock.py)."""
    template = env.get_template("Dockerfile.j2")
    text = template.render(
        cell=cell,
        cell_json=cell.as_json(),
        cell_dir=f"{cell.framework}/{cell.slug}",  # in the build context, images/
        locked=locked,
        apt_locked=apt_locked,
        install_flags=install_flags(cell.install.source_builds),
        uv=installs_with_uv(cell, locked),
        uv_install=uv_install(cell.install.source_builds),
        uv_compile=COMPILE,
        build_flags=flags_for(cell),
        partials=matrix.partials,
        apt_packages=sorted(matrix.packages.apt),
        pip_version=matrix.packages.pip,
        publisher=matrix.publisher,
        framework_license=matrix.frameworks[cell.framework].license,
    )
    # Blank-line runs come from template control flow, not meaning: collapse them for stable output.
    lines = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", lines).strip("\n") + "\n"


def render_tree(root: Path, matrix: Matrix, expansion: Expansion) -> list[GeneratedFile]:
    """Everything under images/, in memory, so nothing is written unless all of it rendered and passed
    `dockerfile_problems`."""
    check_partials(root, matrix)
    env = environment(root)
    files = _assets(root)
    problems: list[Problem] = []
    for cell in expansion.cells:
        base = f"{IMAGES_DIR}/{cell.framework}/{cell.slug}"
        # Locks are written by `invoke lock`, never by render; they decide how pip installs.
        locked = lock_state(root, cell, matrix.packages.pip).locked
        apt_locked = (root / base / APT_LOCK).is_file()
        try:
            dockerfile = render_cell(env, matrix, cell, locked=locked, apt_locked=apt_locked)
        except jinja2.TemplateError as error:
            where = f"{TEMPLATES_DIR}/{getattr(error, 'name', None) or 'Dockerfile.j2'}"
            line = getattr(error, "lineno", None)
            raise InputError(
                [Problem(f"{where}:{line}" if line else where, f"{error} (rendering {cell.slug})")]
            ) from None
        except UnicodeDecodeError as error:
            raise InputError([Problem(_not_utf8(root), f"not UTF-8 text ({error.reason})")]) from None
        except OSError as error:
            raise InputError([Problem(shown(root, error.filename), f"cannot read: {error.strerror}")]) from None
        problems += dockerfile_problems(f"{base}/Dockerfile", dockerfile, cell)
        files.append(GeneratedFile(f"{base}/Dockerfile", dockerfile.encode()))
        files.append(
            GeneratedFile(f"{base}/cell.json", (json.dumps(cell.as_json(), indent=2, sort_keys=True) + "\n").encode())
        )
    if problems:
        raise InputError(
            problems, heading="Rendered Dockerfiles hold what the templates must never write; nothing was written:"
        )
    return sorted(files, key=lambda f: f.path)


def _not_utf8(root: Path) -> str:
    """The first template that is not UTF-8 (Jinja's error does not name it)."""
    for path in sorted((root / TEMPLATES_DIR).rglob("*.j2")):
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return shown(root, path)
    return TEMPLATES_DIR


# --- images/ on disk ------------------------------------------------------------------------------------------


@contextmanager
def rendering(root: Path, *, writing: bool = True) -> Iterator[None]:
    """Renders of one repository take turns: one that writes holds .work/render.lock alone and checks share it, so
    none reads or writes a tree another is part-way through; a later one waits, saying so. A check where the lock
    cannot be made (a read-only checkout) goes ahead without it: it writes nothing."""
    held = ExitStack()
    try:
        held.enter_context(turn(root / RENDER_LOCK, shared=not writing, on_wait=_say_waiting))
    except OSError as error:
        if writing:
            raise InputError([Problem(RENDER_LOCK, f"cannot lock: {error.strerror or error}")]) from None
    with held:
        yield


def _say_waiting() -> None:
    log.info("waiting for another render of this repository to finish (it holds %s) ...", RENDER_LOCK)


def _written_by_render(path: str) -> bool:
    """Whether `path` (under images/, from the root) is where render writes, so a file it may remove: an asset, or
    a cell's Dockerfile or cell.json. Locks, and anything else, are not render's."""
    parts = Path(path).parts
    if len(parts) == 3:
        return parts[1] == ASSETS
    return len(parts) == 4 and parts[1] != ASSETS and parts[3] in CELL_FILES


def _extra(root: Path, files: list[GeneratedFile]) -> tuple[list[str], list[Problem]]:
    """Files under images/ that no cell wants: those render wrote (it removes them), and the rest, each with why
    render keeps it (a lock of a cell that left the matrix, a file put there by hand)."""
    wanted = {f.path for f in files}
    cells = {str(Path(f.path).parent) for f in files if Path(f.path).name == CELL_FILES[0]}
    removable: list[str] = []
    kept: list[Problem] = []
    images = root / IMAGES_DIR
    existing = sorted(images.rglob("*")) if images.is_dir() else []
    for path in [str(p.relative_to(root)) for p in existing if p.is_file()]:
        folder, name = str(Path(path).parent), Path(path).name
        base_lock = fnmatch.fnmatchcase(path, BASE_APT_LOCK.format(os="*"))
        if path in wanted or path == BASES_LOCK or base_lock or (name in CELL_LOCKS and folder in cells):
            continue
        if name.startswith(".") and name.endswith(STAGED):
            kept.append(Problem(path, "left by a render that was stopped part-way; run `invoke render`"))
        elif _written_by_render(path):
            removable.append(path)
        elif name in CELL_LOCKS:
            why = "render never removes a lock: delete it by hand if the cell left the matrix for good"
            kept.append(Problem(path, f"a lock of no cell in matrix.yaml; {why}"))
        else:
            kept.append(Problem(path, "not written by render and used by no cell; render never removes it"))
    return removable, kept


def _obstacles(root: Path, files: list[GeneratedFile]) -> list[Problem]:
    """What stands where render writes: a file or a link where it makes a folder, a folder where it writes a file.
    Render removes only files it wrote, so it names these instead."""
    problems: dict[str, Problem] = {}
    for generated in files:
        parts = Path(generated.path).parts
        for depth in range(1, len(parts)):
            folder = root.joinpath(*parts[:depth])
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                where = "/".join(parts[:depth])
                problems[where] = Problem(where, "a file or a link where render writes a folder; move it away")
                break
        else:
            target = root / generated.path
            if target.is_dir() and not target.is_symlink():
                problems[generated.path] = Problem(generated.path, "a folder where render writes a file; move it away")
    return list(problems.values())


def write_tree(root: Path, files: list[GeneratedFile]) -> list[str]:
    """Bring images/ in line with the rendered files; returns what changed, e.g. "wrote X", "removed Y". Callers
    hold `rendering`.

    images/ is never moved, and what render does not write (locks, files put there by hand) is never rewritten,
    moved or removed. Each file that differs is staged beside its target and, once all are, renamed over it; then
    the files render wrote that no cell wants any more are removed. A failure while staging (a full disk), or a
    rename that fails, leaves images/ as it was and InputError says what failed. A process killed at any point
    leaves each file whole, old or new, and the next render finishes the job.
    """
    try:
        obstacles = _obstacles(root, files)
        if obstacles:
            raise InputError(obstacles, heading="Render writes where these are; nothing was written:")
        remove_staged(root, files)
        removable, kept = _extra(root, files)
    except OSError as error:
        where = shown(root, error.filename) if error.filename else IMAGES_DIR
        raise InputError([Problem(f"{IMAGES_DIR}/", f"cannot read: {error.strerror or error} ({where})")]) from None
    changed = replace(root, files, where=f"{IMAGES_DIR}/")
    for path in removable:
        try:
            (root / path).unlink()
            _remove_empty_folders(root, (root / path).parent)
        except OSError as error:
            raise InputError([Problem(path, f"not removed: {error.strerror or error}")]) from None
        changed.append(f"removed {path}")
    for problem in kept:
        log.info("note: kept %s", problem)
    return changed


def _remove_empty_folders(root: Path, folder: Path) -> None:
    """Remove `folder` and those above it inside images/ while they are empty (a cell that left the matrix)."""
    images = root / IMAGES_DIR
    while folder != images and folder.is_relative_to(images) and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def stale_files(root: Path, files: list[GeneratedFile]) -> list[Problem]:
    """Differences between images/ and a fresh render: stale, hand-edited, missing or extra files (a lock no cell
    uses among them; the locks of the matrix's cells are `invoke lock --check`'s to judge)."""
    problems: list[Problem] = []
    for generated in files:
        target = root / generated.path
        differs = stale(root, generated, "differs from its sources (stale or edited by hand)")
        if differs is not None:
            problems.append(differs)
        elif file_mode(target) != generated.mode:
            mode = f"has mode {file_mode(target):o}, expected {generated.mode:o}"
            problems.append(Problem(generated.path, f"{mode}; run `invoke render`"))
    removable, kept = _extra(root, files)
    problems += [Problem(path, "not generated by any cell; run `invoke render` to remove it") for path in removable]
    return problems + kept
