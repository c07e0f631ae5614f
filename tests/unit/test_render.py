"""Rendering Dockerfiles: exact golden output for representative cells of the fixture matrix, invariants for every
cell of the real one, output that is the same from one process to the next, and images/ drift.

Golden files live in tests/unit/golden/<slug>.Dockerfile: the fixture's cells rendered with the repo's templates.
After an intended template change (or a change to those cells in tests/fixtures/matrix.yaml), regenerate them and
review the diff:

    DLIMAGES_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/test_render.py -k golden
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlimages.cells import Cell, Expansion
from dlimages.errors import InputError
from dlimages.project import Project
from dlimages.render import (
    GeneratedFile,
    check_partials,
    environment,
    render_cell,
    render_tree,
    stale_files,
    write_tree,
)
from dlimages.spec import Matrix

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("DLIMAGES_UPDATE_GOLDEN") == "1"

CellLookup = Callable[[str, str], Cell]
Rendered = tuple[Path, list[GeneratedFile]]

GOLDEN_CELLS = [
    # Ubuntu base, CUDA from PyTorch's cu118 wheels on PyTorch's own index; the image's default cell.
    ("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime"),
    # Debian 12 base made by `invoke base`, PyPI's default wheel (CUDA 12.1 libraries from PyPI).
    ("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime"),
    # PyTorch's find-links page, torchaudio without a local version tag.
    ("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime"),
    # nvidia/cuda devel base with the system's CUDA, and the package set's per-release overrides.
    ("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel"),
    # nvidia/cuda base with a newer cuDNN than upstream tested: a note in the header.
    ("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime"),
    # TensorFlow's CUDA libraries from PyPI, installed by name.
    ("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime"),
]


@pytest.fixture(scope="module")
def rendered(real_matrix: Matrix, real_expansion: Expansion) -> dict[str, str]:
    """Every real cell's Dockerfile, rendered from the repo's templates, keyed by its path under images/."""
    env = environment(REPO)
    return {cell.dockerfile: render_cell(env, real_matrix, cell) for cell in real_expansion.cells}


def _instructions(dockerfile: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined and comment lines dropped."""
    result: list[str] = []
    current = ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
        else:
            result.append((current + line).strip())
            current = ""
    assert not current, "a continuation line runs off the end of the file"
    return result


# --- Golden files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("framework", "slug"), GOLDEN_CELLS, ids=[slug for _, slug in GOLDEN_CELLS])
def test_golden_render(matrix: Matrix, cell: CellLookup, framework: str, slug: str) -> None:
    text = render_cell(environment(REPO), matrix, cell(framework, slug))
    golden = GOLDEN / f"{slug}.Dockerfile"
    if UPDATE_GOLDEN:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.is_file(), f"no golden file {golden.name}; run with DLIMAGES_UPDATE_GOLDEN=1 to create it"
    assert text == golden.read_text(encoding="utf-8"), f"{slug} renders differently from {golden.name}"


def _golden(slug: str) -> str:
    return (GOLDEN / f"{slug}.Dockerfile").read_text(encoding="utf-8")


def test_golden_files_are_the_golden_cells() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.Dockerfile")) == sorted(
        f"{slug}.Dockerfile" for _, slug in GOLDEN_CELLS
    )


def test_golden_cells_show_what_makes_them_representative() -> None:
    ubuntu = _golden("cuda11.8-torch2.1.2-py3.10-runtime")
    assert "# Cell: test/pytorch-dev:v0.9-cuda11.8-torch2.1.2-py3.10-runtime\n" in ubuntu
    assert "ARG BASE_IMAGE=ubuntu:22.04\n" in ubuntu
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118\n" in ubuntu
    assert '"torch==2.1.2+cu118"' in ubuntu
    debian = _golden("cuda12.1-torch2.1.2-py3.11-runtime")
    assert (
        "# Made locally from an apt mirror by `invoke base` (no registry needed).\n"
        "ARG BASE_IMAGE=dlimages/base:debian12\n" in debian
    )
    assert "TORCH_INDEX_URL" not in debian and '"torch==2.1.2" \\' in debian
    assert "/etc/apt/sources.list.d/debian.sources" in debian
    old = _golden("cuda11.0-torch1.7.1-py3.8-runtime")
    assert "ARG TORCH_FIND_LINKS=https://download.pytorch.org/whl/torch_stable.html\n" in old
    assert '"torchaudio==0.7.2"' in old
    tf = _golden("cuda11.0-tf2.4.4-py3.8-devel")
    assert "ARG BASE_IMAGE=nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04\n" in tf
    assert '"numpy==1.19.5"' in tf and "NVIDIA_REQUIRE_CUDA=" not in tf
    assert "# Note: upstream tested cuDNN 8.6;" in _golden("cuda11.8-tf2.13.1-py3.10-runtime")
    assert '"nvidia-cudnn-cu11==8.7.0.84"' in _golden("cuda11.8-tf2.14.1-py3.10-runtime")


def test_every_pip_run_mounts_the_secrets_and_trusts_the_extra_ca_only_when_given() -> None:
    # templates/macros.j2 writes this preamble for every RUN that calls pip.
    runs = [i for i in _instructions(_golden("cuda11.8-torch2.1.2-py3.10-runtime")) if i.startswith("RUN ")]
    pip_runs = [run for run in runs if "pip install" in run]
    assert len(pip_runs) == 3  # pip itself, the framework, the package set
    for run in pip_runs:
        assert "--mount=type=secret,id=pip_ca,uid=1000 " in run
        assert "if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi" in run
    assert sum("--mount=type=secret,id=netrc," in run for run in pip_runs) == 2


# --- Invariants of every rendered Dockerfile ----------------------------------------------------------------


# `invoke render`, without tasks.py: the package calls that task makes, in the current folder.
_RENDER = """
from pathlib import Path
from dlimages.project import Project
from dlimages.render import render_tree, write_tree
project = Project(Path.cwd())
write_tree(project.root, render_tree(project.root, project.matrix, project.expansion))
"""


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), os.access(p, os.X_OK))
        for p in sorted((root / "images").rglob("*"))
        if p.is_file()
    }


def test_rendering_is_the_same_in_two_processes(tmp_path: Path) -> None:
    # Two interpreters with different hash seeds: set or dict order leaking into the output would show here.
    trees = []
    for seed in ("1", "2"):
        root = tmp_path / f"render-{seed}"
        root.mkdir()
        shutil.copy2(REPO / "matrix.yaml", root / "matrix.yaml")
        shutil.copytree(REPO / "templates", root / "templates")
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", _RENDER], cwd=root, env=env, check=True, timeout=60)
        trees.append(_tree(root))
    assert trees[0] and trees[0] == trees[1]


def test_every_dockerfile_starts_with_the_generated_header(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        head = rendered[c.dockerfile].splitlines()[:4]
        assert (
            head[0]
            == "# Generated by dlimages from matrix.yaml and templates/: do not edit; run `invoke render` instead."
        )
        assert head[1] == f"# Cell: {c.image}:{c.immutable_tag}"
        flag = "torch" if c.framework == "pytorch" else "tf"
        build = f"invoke build --cuda {c.cuda} --{flag} {c.framework_version} --python {c.python} --flavor {c.flavor}"
        assert head[3] == f"# Build: {build}"


def test_every_dockerfile_labels_its_facts(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        [label] = [i for i in _instructions(rendered[c.dockerfile]) if i.startswith("LABEL ")]
        labels = dict(re.findall(r'(\S+)="([^"]*)"', label))
        expected = {
            "io.dlimages.cuda": c.cuda,
            "io.dlimages.cudnn": c.cudnn,
            "io.dlimages.framework": c.framework,
            "io.dlimages.framework-version": c.framework_version,
            "io.dlimages.python": c.python,
            "io.dlimages.min-driver": c.min_driver,
            "org.opencontainers.image.title": c.image,
            "org.opencontainers.image.version": c.immutable_tag,
            "org.opencontainers.image.base.name": c.base_image,
            "org.opencontainers.image.revision": "${REVISION}",
        }
        assert {key: labels.get(key) for key in expected} == expected, c.slug


def test_every_dockerfile_exposes_the_gpu(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        text = rendered[c.dockerfile]
        env = " ".join(i for i in _instructions(text) if i.startswith("ENV "))
        assert "NVIDIA_VISIBLE_DEVICES=all" in env, c.slug
        assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env, c.slug
        if c.cuda_source == "wheel":
            # Without the nvidia/cuda base nothing else tells the container toolkit which driver is needed.
            assert f'NVIDIA_REQUIRE_CUDA="cuda>={c.cuda}"' in env, c.slug
        else:
            assert "NVIDIA_REQUIRE_CUDA" not in env, f"{c.slug} must keep the base image's driver-branch exceptions"


def test_every_dockerfile_ends_as_a_non_root_user(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        users = [i for i in _instructions(rendered[c.dockerfile]) if i.startswith("USER ")]
        assert users, c.slug
        assert re.fullmatch(r"USER 1000(:1000)?", users[-1]), f"{c.slug}: last {users[-1]!r}"


_PIP_OPTIONS_WITH_VALUE = {
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
}


def _pip_requirements(instruction: str) -> list[str]:
    """The requirement arguments of every `pip install` in a RUN instruction."""
    requirements: list[str] = []
    lexer = shlex.shlex(instruction, posix=True, punctuation_chars="&;|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", ";", "||", "|", "&"):
            commands.append([])
        else:
            commands[-1].append(token)
    for words in commands:
        for i in range(len(words) - 1):
            if words[i].endswith("pip") and words[i + 1] == "install":
                args = words[i + 2 :]
                skip = False
                for word in args:
                    if skip:
                        skip = False
                    elif word in _PIP_OPTIONS_WITH_VALUE:
                        skip = True
                    elif not word.startswith("-"):
                        requirements.append(word)
    return requirements


def test_every_pip_requirement_is_pinned(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        runs = [i for i in _instructions(rendered[c.dockerfile]) if i.startswith("RUN ")]
        requirements = [r for run in runs for r in _pip_requirements(run)]
        assert len(requirements) >= 1 + len(c.install.requirements) + len(c.packages), c.slug
        unpinned = [
            r for r in requirements if not re.fullmatch(r"[A-Za-z0-9._-]+(\[[a-z0-9,-]+\])?==[A-Za-z0-9.+]+", r)
        ]
        assert not unpinned, f"{c.slug}: {unpinned}"


def test_the_pin_check_catches_an_unpinned_requirement() -> None:
    run = 'RUN pip install --constraint /c.txt "numpy==1.0" scipy && pip install -U pip'
    assert _pip_requirements(run) == ["numpy==1.0", "scipy", "pip"]


def test_every_apt_layer_removes_the_package_lists(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        updates = [i for i in _instructions(rendered[c.dockerfile]) if "apt-get update" in i]
        assert updates, c.slug
        for run in updates:
            assert run.endswith("&& rm -rf /var/lib/apt/lists/*"), f"{c.slug}: {run[:80]}"


def test_no_dockerfile_pins_a_frontend_syntax(rendered: dict[str, str]) -> None:
    # A `# syntax=` line makes BuildKit pull a frontend image from a registry, which offline builds cannot.
    for path, text in rendered.items():
        assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE), path


def test_every_dockerfile_copies_its_own_cell_json(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        assert (
            f"COPY --chown=root:root {c.framework}/{c.slug}/cell.json /etc/dlimages/cell.json" in rendered[c.dockerfile]
        )


# --- images/ on disk ------------------------------------------------------------------------------------------


def test_committed_images_are_up_to_date(real_matrix: Matrix, real_expansion: Expansion) -> None:
    problems = stale_files(REPO, render_tree(REPO, real_matrix, real_expansion))
    assert problems == [], "\n".join(map(str, problems))


@pytest.fixture
def rendered_copy(repo_copy: Path) -> Rendered:
    """A temporary repo (the fixture matrix, the real templates) with images/ freshly written."""
    project = Project(repo_copy)
    files = render_tree(repo_copy, project.matrix, project.expansion)
    assert len(write_tree(repo_copy, files)) == len(files)
    assert stale_files(repo_copy, files) == []
    return repo_copy, files


def test_stale_files_detects_a_hand_edited_file(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    path = "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile"
    with (root / path).open("a", encoding="utf-8") as handle:
        handle.write("RUN echo hand-made\n")
    assert [str(p) for p in stale_files(root, files)] == [
        f"{path}: differs from its sources (stale or edited by hand); run `invoke render`"
    ]


def test_stale_files_detects_a_missing_file(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    path = "images/tensorflow/cuda11.0-tf2.4.4-py3.8-devel/cell.json"
    (root / path).unlink()
    assert [str(p) for p in stale_files(root, files)] == [f"{path}: missing; run `invoke render`"]


def test_stale_files_detects_an_extra_file(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    extra = root / "images/pytorch/cuda11.7-torch9.0.0-py3.10-runtime/Dockerfile"
    extra.parent.mkdir()
    extra.write_text("FROM scratch\n", encoding="utf-8")
    assert [str(p) for p in stale_files(root, files)] == [
        "images/pytorch/cuda11.7-torch9.0.0-py3.10-runtime/Dockerfile: not generated by any cell; "
        "run `invoke render` to remove it"
    ]


def test_stale_files_detects_a_wrong_mode(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    (root / "images/assets/dl-entrypoint").chmod(0o644)
    assert [str(p) for p in stale_files(root, files)] == [
        "images/assets/dl-entrypoint: has mode 644, expected 755; run `invoke render`"
    ]


def test_write_tree_repairs_drift_and_is_then_idempotent(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    (root / "images/assets/dl-entrypoint").chmod(0o644)
    (root / "images/tensorflow/cuda11.0-tf2.4.4-py3.8-devel/cell.json").unlink()
    (root / "images/pytorch/old").mkdir()
    (root / "images/pytorch/old/Dockerfile").write_text("FROM scratch\n", encoding="utf-8")
    assert sorted(write_tree(root, files)) == [
        "removed images/pytorch/old/Dockerfile",
        "wrote images/assets/dl-entrypoint",
        "wrote images/tensorflow/cuda11.0-tf2.4.4-py3.8-devel/cell.json",
    ]
    assert not (root / "images/pytorch/old").exists()
    assert stale_files(root, files) == []
    assert write_tree(root, files) == []


def test_missing_partial_is_reported_with_the_partials_that_exist(matrix: Matrix, repo_copy: Path) -> None:
    (repo_copy / "templates/partials/jupyterlab.j2").unlink()
    with pytest.raises(InputError) as caught:
        check_partials(repo_copy, matrix)
    assert caught.value.report() == (
        "error: matrix.yaml: partials[6]: no template templates/partials/jupyterlab.j2 "
        "(allowed: base, framework, labels, mirrors, os-packages, packages, shell, user)"
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "images").rglob("*")) if p.is_file()}


def test_render_writes_nothing_when_validation_fails(rendered_copy: Rendered) -> None:
    root, _ = rendered_copy
    before = _snapshot(root)
    matrix_file = root / "matrix.yaml"
    matrix_file.write_text(
        matrix_file.read_text(encoding="utf-8").replace(
            "partials: [base, mirrors,", "partials: [base, proxy, mirrors,", 1
        ),
        encoding="utf-8",
    )
    (root / "templates/partials/labels.j2").write_text("LABEL changed=1\n", encoding="utf-8")  # would change every file
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "render"], cwd=root, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "error: matrix.yaml: partials[1]: no template templates/partials/proxy.j2" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert _snapshot(root) == before
