"""Render every cell's Dockerfile (and the assets images copy) into images/, deterministically, and the docs made
from the matrix (README's table, docs/provisioning.md's driver tables, docs/matrix.svg: text from matrixdocs).

Everything is rendered in memory and checked (each Dockerfile holds only the instructions the templates write)
before anything is written; the new tree is then written beside images/ and swapped in, so images/ is always
either the old tree or the new one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from dlimages.cells import Cell, Expansion
from dlimages.errors import InputError, Problem, allowed_list
from dlimages.grammar import reference_problem
from dlimages.lock import LOCK_FILES, install_flags, lock_state
from dlimages.matrixdocs import PICTURE, README, Block, blocks, matrix_svg, splice
from dlimages.selection import flags_for
from dlimages.spec import MATRIX_FILE, Matrix

IMAGES_DIR = "images"
TEMPLATES_DIR = "templates"
# Beside images/ (same folder, so renames swap them): the tree being written, and the tree being replaced.
NEW_TREE = ".images.new"
BASES_LOCK = f"{IMAGES_DIR}/bases.lock.json"  # written by `invoke bases --lock` (baselock.py)
OLD_TREE = ".images.old"
EXECUTABLE = 0o755
REGULAR = 0o644


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to the repo root
    content: bytes
    mode: int = REGULAR
    part: str = ""  # what of the file is generated, for messages ("the block between ..."); empty: all of it


def _assets(root: Path) -> list[GeneratedFile]:
    """Files every image copies: the templates' assets and the in-image commands from the package."""
    source = root / TEMPLATES_DIR / "assets"
    if not source.is_dir():
        where = f"{TEMPLATES_DIR}/assets"
        raise InputError(
            [Problem(where, "missing: the folder of files every image copies (dl-entrypoint, zshrc, ...)")]
        )
    try:
        files = [
            GeneratedFile(
                f"{IMAGES_DIR}/assets/{path.name}",
                path.read_bytes(),
                EXECUTABLE if os.access(path, os.X_OK) else REGULAR,
            )
            for path in sorted(source.iterdir())
            if path.is_file()
        ]
    except OSError as error:
        raise InputError([Problem(_shown(root, error.filename), f"cannot read: {error.strerror}")]) from None
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


def render_cell(env: jinja2.Environment, matrix: Matrix, cell: Cell, *, locked: bool = False) -> str:
    """The cell's Dockerfile; `locked`: its packages install from the lock beside it (lock.py), not by resolving."""
    template = env.get_template("Dockerfile.j2")
    text = template.render(
        cell=cell,
        cell_json=cell.as_json(),
        cell_dir=f"{cell.framework}/{cell.slug}",  # in the build context, images/
        locked=locked,
        install_flags=install_flags(cell.install.source_builds),
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
    """Everything under images/, in memory, so nothing is written unless all of it rendered and passed
    `dockerfile_problems`."""
    check_partials(root, matrix)
    env = environment(root)
    files = _assets(root)
    problems: list[Problem] = []
    files += _carried(root, BASES_LOCK)
    for cell in expansion.cells:
        base = f"{IMAGES_DIR}/{cell.framework}/{cell.slug}"
        # Locks are written by `invoke lock`, not rendered: a render keeps them, and they decide how pip installs.
        locked = lock_state(root, cell, matrix.packages.pip).locked
        files += [f for name in LOCK_FILES for f in _carried(root, f"{base}/{name}")]
        try:
            dockerfile = render_cell(env, matrix, cell, locked=locked)
        except jinja2.TemplateError as error:
            where = f"{TEMPLATES_DIR}/{getattr(error, 'name', None) or 'Dockerfile.j2'}"
            line = getattr(error, "lineno", None)
            raise InputError(
                [Problem(f"{where}:{line}" if line else where, f"{error} (rendering {cell.slug})")]
            ) from None
        except UnicodeDecodeError as error:
            raise InputError([Problem(_not_utf8(root), f"not UTF-8 text ({error.reason})")]) from None
        except OSError as error:
            raise InputError([Problem(_shown(root, error.filename), f"cannot read: {error.strerror}")]) from None
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


def _carried(root: Path, path: str) -> list[GeneratedFile]:
    """A file under images/ that another task writes (a lock), kept as it is when it exists."""
    source = root / path
    try:
        return [GeneratedFile(path, source.read_bytes())] if source.is_file() else []
    except OSError as error:
        raise InputError([Problem(path, f"cannot read: {error.strerror}")]) from None


# --- What a rendered Dockerfile may hold ----------------------------------------------------------------------

GENERATED_HEADER = "# Generated by dlimages from matrix.yaml and templates/: do not edit; run `invoke render` instead."
# The instructions the templates write. Not ADD (it fetches URLs), ONBUILD, VOLUME, HEALTHCHECK, STOPSIGNAL, ...
ALLOWED_INSTRUCTIONS = ("ARG", "FROM", "SHELL", "ENV", "RUN", "USER", "WORKDIR", "COPY", "EXPOSE", "LABEL",
                        "ENTRYPOINT", "CMD")  # fmt: skip
FROM_LINE = "FROM ${BASE_IMAGE}"
USER_LINE = "USER 1000:1000"
SHELL_LINE = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]'
# RUN may mount a cache, a BuildKit secret, a tmpfs, or one file of the build context under /mnt; nothing else (no
# --network, --security, ssh mounts, binds from other images or stages, writable binds).
_RUN_FLAG = re.compile(
    r"--mount=type=(?:cache|secret),(?:(?!from=)[A-Za-z0-9_=/.,-])+"
    r"|--mount=type=tmpfs,target=/[A-Za-z0-9_/.-]+"
    r"|--mount=type=bind,source=(?!/)(?!.*\.\.)[A-Za-z0-9_/.-]+,target=/mnt/[A-Za-z0-9_.-]+"
)
_COPY_FLAG = re.compile(r"--chown=[a-z0-9_-]+:[a-z0-9_-]+")
_HEREDOC = re.compile(r"<<-?\s*[\"']?[A-Za-z_]")


def dockerfile_problems(path: str, text: str, cell: Cell) -> list[Problem]:
    """What in a rendered Dockerfile the templates never write, one Problem per line: a second FROM (or `AS`),
    a user other than 1000:1000, an instruction or flag that fetches, mounts or runs anything else, a parser
    directive, text outside printable ASCII. Run on every render, so a value or a template edit that slips past
    validation cannot reach a build."""
    problems: list[Problem] = []

    def problem(line: int, message: str, allowed: str = "") -> None:
        problems.append(Problem(f"{path}:{line}", message, allowed))

    lines = text.splitlines()
    if not lines or lines[0] != GENERATED_HEADER:
        problem(
            1, "does not start with the generated header (a parser directive such as `# syntax=` may not come first)"
        )
    for number, line in enumerate(lines, start=1):
        if not (line.isascii() and line.isprintable()):
            problem(number, "has characters outside printable ASCII")
    froms = users = 0
    for number, instruction in _instructions(lines):
        keyword, _, rest = instruction.partition(" ")
        if keyword not in ALLOWED_INSTRUCTIONS:
            problem(
                number,
                f"instruction {keyword[:20]!r} is not one the templates write",
                allowed_list(ALLOWED_INSTRUCTIONS),
            )
            continue
        if froms == 0 and keyword != "FROM":
            if instruction != f"ARG BASE_IMAGE={cell.base_image}" or reference_problem(cell.base_image):
                problem(number, "only `ARG BASE_IMAGE=<image reference>` may come before FROM")
        elif keyword == "FROM":
            froms += 1
            if instruction != FROM_LINE or froms > 1:
                problem(number, "a second FROM, or a FROM other than the one the templates write", FROM_LINE)
        elif keyword == "USER":
            users += 1
            if instruction != USER_LINE:
                problem(number, "switches to a user other than the image's own", USER_LINE)
        elif keyword == "SHELL" and instruction != SHELL_LINE:
            problem(number, "sets another shell", SHELL_LINE)
        elif keyword in ("RUN", "COPY"):
            flag = _RUN_FLAG if keyword == "RUN" else _COPY_FLAG
            words = rest.split()
            for word in words:
                if not word.startswith("--"):
                    break
                if not flag.fullmatch(word):
                    problem(number, f"{keyword} with the flag {word[:80]!r}, which the templates never use")
            if _HEREDOC.search(rest):
                problem(number, f"{keyword} with a here-document, which the templates never use")
    if froms == 0:
        problem(len(lines), "has no FROM", FROM_LINE)
    if users == 0:
        problem(len(lines), "never switches to the image's own user: the image would run as root", USER_LINE)
    return problems


def _instructions(lines: list[str]) -> list[tuple[int, str]]:
    """Each instruction with its first line number, continuation lines joined, comments and blank lines dropped."""
    result: list[tuple[int, str]] = []
    current, start = "", 0
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#") or not line.strip():
            continue  # Docker drops comment lines inside an instruction too
        if not current:
            start = number
        if line.endswith("\\"):
            current += line[:-1] + " "
        else:
            result.append((start, " ".join((current + line).split())))
            current = ""
    if current:
        result.append((start, " ".join(current.split())))
    return result


def _existing(root: Path) -> dict[str, Path]:
    images = root / IMAGES_DIR
    if not images.is_dir():
        return {}
    return {str(p.relative_to(root)): p for p in sorted(images.rglob("*")) if p.is_file()}


def _changes(root: Path, files: list[GeneratedFile]) -> list[str]:
    changed = [
        f"wrote {generated.path}"
        for generated in files
        if not (
            (target := root / generated.path).is_file()
            and target.read_bytes() == generated.content
            and _mode(target) == generated.mode
        )
    ]
    wanted = {f.path for f in files}
    return changed + [f"removed {path}" for path in _existing(root) if path not in wanted]


def write_tree(root: Path, files: list[GeneratedFile]) -> list[str]:
    """Bring images/ in line with the rendered files; returns what changed, e.g. "wrote X", "removed Y".

    All or nothing: the whole tree is written to .images.new beside images/, then two renames swap it in. On any
    failure images/ is left exactly as it was, the new tree is removed, and InputError says what failed.
    """
    images, new, old = root / IMAGES_DIR, root / NEW_TREE, root / OLD_TREE
    try:
        changed = _changes(root, files)
        if not changed:
            return []
        for leftover in (new, old):  # from a render that was killed half-way
            _remove(leftover)
        new.mkdir()
        for generated in files:
            target = new / Path(generated.path).relative_to(IMAGES_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(generated.content)
            target.chmod(generated.mode)
        had_images = images.exists() or images.is_symlink()
        if had_images:
            images.rename(old)
        try:
            new.rename(images)
        except OSError:
            if had_images:
                old.rename(images)
            raise
    except OSError as error:
        try:
            _remove(new)
        except OSError:
            pass  # reported below; the next render removes it first
        where = _shown(root, error.filename) if error.filename else IMAGES_DIR
        raise InputError(
            [Problem(f"{IMAGES_DIR}/", f"not written, left as it was: {error.strerror or error} ({where})")]
        ) from None
    try:
        _remove(old)
    except OSError:
        pass  # the new tree is in place; a leftover .images.old is removed by the next render
    return changed


def _remove(path: Path) -> None:
    """Remove a file or a whole tree if it is there, making its folders writable first (a read-only copy)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        for folder, _, _ in os.walk(path):
            os.chmod(folder, stat.S_IRWXU)
        shutil.rmtree(path)


def _not_utf8(root: Path) -> str:
    """The first template that is not UTF-8 (Jinja's error does not name it)."""
    for path in sorted((root / TEMPLATES_DIR).rglob("*.j2")):
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return _shown(root, path)
    return TEMPLATES_DIR


def _shown(root: Path, filename: object) -> str:
    """A path for a message: relative to the repo root where it is inside it."""
    path = Path(str(filename))
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


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


# --- The docs made from the matrix: README's table, docs/provisioning.md's driver tables, docs/matrix.svg ---------


def render_documents(root: Path, matrix: Matrix, expansion: Expansion) -> list[GeneratedFile]:
    """The documents with their generated blocks in place, and the picture, in memory (matrixdocs makes the text).

    Only in a tree with a README.md: the copies of the repo that tests make have none, and a document that holds
    blocks is never created from nothing (the picture is). Where README.md is, every document a block goes in must
    hold its markers; otherwise InputError names each document and nothing is written.
    """
    if not (root / README).is_file():
        return []
    locks = {cell.slug: lock_state(root, cell, matrix.packages.pip).status for cell in expansion.cells}
    by_document: dict[str, list[Block]] = {}
    for block in blocks(matrix, expansion, locks):
        by_document.setdefault(block.document, []).append(block)
    files: list[GeneratedFile] = []
    problems: list[Problem] = []
    for document, parts in by_document.items():
        try:
            text = (root / document).read_bytes().decode("utf-8")  # bytes: line endings outside blocks stay as they are
        except FileNotFoundError:
            names = ", ".join(f"`{block.begin}` ... `{block.end}`" for block in parts)
            problems.append(Problem(document, f"missing: it holds the blocks {names} that `invoke render` writes"))
            continue
        except OSError as error:
            problems.append(Problem(document, f"cannot read: {error.strerror}"))
            continue
        except UnicodeDecodeError as error:
            problems.append(Problem(document, f"not UTF-8 text ({error.reason})"))
            continue
        try:
            for block in parts:
                text = splice(text, block)
        except InputError as error:
            problems += error.problems
            continue
        part = parts[0].where if len(parts) == 1 else "a block of " + ", ".join(f"`{block.begin}`" for block in parts)
        files.append(GeneratedFile(document, text.encode(), part=part))
    if problems:
        raise InputError(
            problems, heading="The docs generated from matrix.yaml have nowhere to go; nothing was written:"
        )
    files.append(GeneratedFile(PICTURE, matrix_svg(matrix, expansion).encode(), part="the picture of the matrix"))
    return files


def stale_documents(root: Path, files: list[GeneratedFile]) -> list[Problem]:
    """Documents whose generated part differs from a fresh render (stale, or edited by hand), or that are missing."""
    problems: list[Problem] = []
    for generated in files:
        target = root / generated.path
        if not target.is_file():
            problems.append(Problem(generated.path, "missing; run `invoke render`"))
        elif target.read_bytes() != generated.content:
            what = generated.part or "its content"
            problems.append(
                Problem(
                    generated.path, f"{what} differs from matrix.yaml (stale or edited by hand); run `invoke render`"
                )
            )
    return problems


def write_documents(root: Path, files: list[GeneratedFile]) -> list[str]:
    """Write the documents that differ ("wrote X" for each), each whole or not at all (a new file renamed over it)."""
    changed: list[str] = []
    for generated in files:
        target = root / generated.path
        if target.is_file() and target.read_bytes() == generated.content:
            continue
        new = target.with_name(f".{target.name}.new")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            new.write_bytes(generated.content)
            new.chmod(generated.mode)
            os.replace(new, target)
        except OSError as error:
            try:
                new.unlink(missing_ok=True)
            except OSError:
                pass  # reported below
            raise InputError(
                [Problem(generated.path, f"not written, left as it was: {error.strerror or error}")]
            ) from None
        changed.append(f"wrote {generated.path}")
    return changed
