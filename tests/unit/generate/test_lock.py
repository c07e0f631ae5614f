"""Locks (lock.py): reading uv's output, cutting it into the install's layers, telling stale locks from fresh ones,
and resolving under a time limit. No network: uv is a fake here (tests/image/test_lock_resolve.py runs the real one).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts import layout, pythonlock
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.generate import lock
from dlimages.generate.project import Project
from dlimages.generate.render import render_cell
from dlimages.generate.templating import environment
from dlimages.model.cells import Cell, Expansion, expand
from dlimages.model.spec import Matrix

PYPI_CELL = ("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
INDEX_CELL = ("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")
PIP = "24.3.1"

# What `uv pip compile --generate-hashes --no-header --annotation-style split` writes, shortened.
UV_OUTPUT = """\
filelock==3.13.1 \\
    --hash=sha256:aaaa
    # via
    #   torch
    #   triton
jupyterlab==4.0.9 \\
    --hash=sha256:bbbb
    # via -r requirements.in
mpmath==1.3.0 \\
    --hash=sha256:cccc
    # via sympy
numpy==1.24.4 \\
    --hash=sha256:dddd \\
    --hash=sha256:eeee
    # via
    #   -r requirements.in
    #   torchvision
pip==24.3.1 \\
    --hash=sha256:ffff
    # via -r requirements.in
setuptools==75.3.0 \\
    --hash=sha256:abcd
    # via -r requirements.in
sympy==1.12 \\
    --hash=sha256:1111
    # via torch
tornado==6.4 \\
    --hash=sha256:2222
    # via jupyterlab
torch==2.1.2 \\
    --hash=sha256:3333
    # via
    #   -r requirements.in
    #   torchaudio
    #   torchvision
torchaudio==2.1.2 \\
    --hash=sha256:4444
    # via -r requirements.in
torchvision==0.16.2 \\
    --hash=sha256:5555
    # via -r requirements.in
triton==2.1.0 \\
    --hash=sha256:6666
    # via torch
Typing_Extensions==4.9.0 \\
    --hash=sha256:7777
    # via torch
"""


@pytest.fixture
def pypi_cell(cell: Callable[[str, str], Cell]) -> Cell:
    return cell(*PYPI_CELL)


def names(pins: Sequence[pythonlock.Pin]) -> list[str]:
    return [pin.name for pin in pins]


def test_uv_output_is_read_pin_by_pin_with_who_required_each() -> None:
    pins = pythonlock.parse_compiled(UV_OUTPUT)
    assert len(pins) == 13
    by_name = {pin.name: pin for pin in pins}
    assert by_name["filelock"].parents == ("torch", "triton")
    assert by_name["numpy"].parents == ("-r", "torchvision")
    assert by_name["mpmath"].parents == ("sympy",)
    assert "typing-extensions" in by_name, "names are PEP 503-normalised"
    assert by_name["numpy"].text.count("--hash=sha256:") == 2


def test_the_framework_slice_is_the_framework_and_everything_it_pulls_in() -> None:
    pins = pythonlock.parse_compiled(UV_OUTPUT)
    wanted = pythonlock.closure(pins, ["torch", "torchvision", "torchaudio"])
    assert wanted == {
        "torch", "torchvision", "torchaudio", "filelock", "numpy", "sympy", "mpmath", "triton", "typing-extensions"
    }  # fmt: skip
    assert "jupyterlab" not in wanted and "tornado" not in wanted and "pip" not in wanted and "setuptools" not in wanted


def test_lock_files_are_three_slices_of_one_resolution_each_naming_its_input(pypi_cell: Cell) -> None:
    locked = pythonlock.lock_input(pypi_cell, PIP)
    files = pythonlock.lock_files(pypi_cell, locked, pythonlock.parse_compiled(UV_OUTPUT), "uv 0.13.9")
    assert set(files) == {"requirements.lock", "framework.lock", "pip.lock"}
    for text in files.values():
        assert f"# Input: {locked.digest()}\n" in text
        assert "invoke lock --cuda 12.1 --torch 2.1.2 --python 3.10 --flavor runtime" in text
        assert "uv 0.13.9" in text
    assert names(pythonlock.parse_compiled(files["requirements.lock"])) == names(pythonlock.parse_compiled(UV_OUTPUT))
    assert names(pythonlock.parse_compiled(files["pip.lock"])) == ["pip", "setuptools"]
    framework = names(pythonlock.parse_compiled(files["framework.lock"]))
    assert "torch" in framework and "jupyterlab" not in framework and "pip" not in framework


def test_the_input_digest_moves_with_every_pin_python_and_index_and_nothing_else(
    expansion: Expansion, pypi_cell: Cell
) -> None:
    base = pythonlock.lock_input(pypi_cell, PIP)
    assert pythonlock.lock_input(pypi_cell, PIP).digest() == base.digest()
    assert pythonlock.lock_input(pypi_cell, "24.3.2").digest() != base.digest()
    moved = [
        base.__class__(
            tuple(r.replace("numpy==1.24.4", "numpy==1.24.3") for r in base.requirements), base.roots, "3.10"
        ),
        base.__class__(base.requirements, base.roots, "3.11"),
        base.__class__(base.requirements, base.roots, "3.10", extra_index_url="https://example.org/simple"),
    ]
    assert len({m.digest() for m in moved} | {base.digest()}) == 4
    # Cells differing in more than their flavor (runtime/devel install the same packages) have inputs of their own.
    digests = {
        (c.framework, c.framework_version, c.cuda, c.python): pythonlock.lock_input(c, PIP).digest()
        for c in expansion.cells
    }
    assert len(set(digests.values())) == len(digests)


def test_the_input_holds_pip_the_framework_and_the_package_set(pypi_cell: Cell) -> None:
    locked = pythonlock.lock_input(pypi_cell, PIP)
    assert locked.requirements[:2] == ("pip==24.3.1", "setuptools")
    assert "torch==2.1.2" in locked.requirements
    assert all(f"{n}=={v}" in locked.requirements for n, v in pypi_cell.packages)
    assert locked.roots[0] == "torch" and locked.pypi_only


def write_state(root: Path, cell: Cell, files: dict[str, str]) -> None:
    folder = layout.cell_dir(root, cell)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_lock_state_tells_locked_stale_broken_and_unlocked(tmp_path: Path, pypi_cell: Cell) -> None:
    assert pythonlock.lock_state(tmp_path, pypi_cell, PIP).status == "unlocked"
    files = pythonlock.lock_files(
        pypi_cell, pythonlock.lock_input(pypi_cell, PIP), pythonlock.parse_compiled(UV_OUTPUT), "uv 0.13.9"
    )
    write_state(tmp_path, pypi_cell, files)
    assert pythonlock.lock_state(tmp_path, pypi_cell, PIP).status == "locked"
    assert pythonlock.lock_state(tmp_path, pypi_cell, "24.3.2").status == "stale"
    (layout.cell_dir(tmp_path, pypi_cell) / "pip.lock").unlink()
    broken = pythonlock.lock_state(tmp_path, pypi_cell, PIP)
    assert broken.status == "broken" and "pip.lock missing" in broken.detail
    write_state(tmp_path, pypi_cell, {"pip.lock": "pip==24.3.1 \\\n    --hash=sha256:ffff\n"})
    assert "no `# Input:` line" in pythonlock.lock_state(tmp_path, pypi_cell, PIP).detail


def test_check_fails_on_stale_and_missing_pypi_locks_but_not_on_index_cells(
    tmp_path: Path, cell: Callable[[str, str], Cell], pypi_cell: Cell
) -> None:
    index_cell = cell(*INDEX_CELL)
    problems = pythonlock.lock_problems(tmp_path, [pypi_cell, index_cell], PIP)
    assert [p.where for p in problems] == [f"images/pytorch/{PYPI_CELL[1]}"]
    assert "every package comes from PyPI" in problems[0].message
    assert "invoke lock --cuda 12.1 --torch 2.1.2 --python 3.10 --flavor runtime" in problems[0].message
    files = pythonlock.lock_files(
        pypi_cell, pythonlock.lock_input(pypi_cell, PIP), pythonlock.parse_compiled(UV_OUTPUT), "uv 0.13.9"
    )
    write_state(tmp_path, pypi_cell, files)
    assert pythonlock.lock_problems(tmp_path, [pypi_cell, index_cell], PIP) == []
    [stale] = pythonlock.lock_problems(tmp_path, [pypi_cell], "24.3.2")
    assert "the lock is stale" in stale.message and "invoke lock --cuda 12.1" in stale.message


def test_uv_is_asked_for_the_cells_python_and_platform_with_hashes_and_wheels_only(
    pypi_cell: Cell, cell: Callable[[str, str], Cell]
) -> None:
    argv = lock.compile_argv(pythonlock.lock_input(pypi_cell, PIP), Path("in.txt"), Path("out.lock"), ["jupyterlab"])
    text = " ".join(argv)
    for expected in (
        "--python-version 3.10",
        "--python-platform x86_64-manylinux_2_28",
        "--generate-hashes",
        "--only-binary :all:",
        "--no-config",
        "--upgrade-package jupyterlab",
        "--output-file out.lock",
    ):
        assert expected in text
    assert "--extra-index-url" not in text and "--index-strategy" not in text
    index = lock.compile_argv(pythonlock.lock_input(cell(*INDEX_CELL), PIP), Path("i"), Path("o"))
    assert index[index.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu118"
    # A package PyTorch's index has comes from it alone (PyTorch's `--index-url`), whatever UV_INDEX_STRATEGY says.
    assert index[index.index("--index-strategy") + 1] == "first-index"


calls: list[list[str]] = []


def fake_uv(output: str | None = UV_OUTPUT, *, code: int = 0, err: str = "", hang: bool = False) -> Runner:
    """A Runner whose `uv` writes `output` into --output-file (or fails, or hangs) and reports a version."""

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[:2] == ["uv", "--version"]:
            return subprocess.CompletedProcess(argv, 0, "uv 0.13.9 (x86_64-unknown-linux-gnu)\n", "")
        if hang:
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        if output is not None and code == 0:
            Path(kwargs.get("cwd", "."), argv[argv.index("--output-file") + 1]).write_text(output)
        return subprocess.CompletedProcess(argv, code, "", err)

    return Runner(run=run)


def test_a_resolution_writes_the_lock_and_says_so(tmp_path: Path, pypi_cell: Cell) -> None:
    said: list[str] = []
    package_set = ["pandas==2.0.3", "scipy==1.10.1", "matplotlib==3.7.3", "opencv-python-headless==4.8.1.78",
                   "pillow==10.0.1", "tqdm==4.66.1", "pyyaml==6.0.1", "requests==2.31.0",
                   "ipykernel==6.26.0"]  # fmt: skip
    output = UV_OUTPUT + "".join(f"{pin} \\\n    --hash=sha256:99\n" for pin in package_set)
    [result] = lock.lock_cells(tmp_path, [pypi_cell], PIP, fake_uv(output), say=said.append)
    assert result.ok, result.problem
    assert pythonlock.lock_state(tmp_path, pypi_cell, PIP).status == "locked"
    # uv runs in its scratch folder on relative names: no temporary path reaches the committed lock.
    assert all(not Path(word).is_absolute() for word in calls[-1][3:6]) and "requirements.in" in calls[-1]
    assert said[0].startswith(f"locked {PYPI_CELL[1]}: 22 packages in ")


def test_a_resolution_that_hangs_is_stopped_and_names_the_requirements(tmp_path: Path, pypi_cell: Cell) -> None:
    said: list[str] = []
    [result] = lock.lock_cells(tmp_path, [pypi_cell], PIP, fake_uv(hang=True), timeout=5, say=said.append)
    assert not result.ok
    assert "did not resolve within 5 s" in result.problem and "numpy==1.24.4" in result.problem
    assert said[0].startswith(f"NOT locked {PYPI_CELL[1]}")
    assert pythonlock.lock_state(tmp_path, pypi_cell, PIP).status == "unlocked", "nothing written for a failed cell"


def test_uvs_own_explanation_of_a_conflict_is_passed_on(tmp_path: Path, pypi_cell: Cell) -> None:
    err = "  x No solution found when resolving dependencies:\n  `-> Because numpy==1.19.5 has no wheels ...\n"
    [result] = lock.lock_cells(tmp_path, [pypi_cell], PIP, fake_uv(code=1, err=err), say=lambda _: None)
    assert "uv could not resolve the set" in result.problem and "numpy==1.19.5 has no wheels" in result.problem


def test_output_missing_a_requirement_is_refused(tmp_path: Path, pypi_cell: Cell) -> None:
    [result] = lock.lock_cells(tmp_path, [pypi_cell], PIP, fake_uv(UV_OUTPUT), say=lambda _: None)
    assert not result.ok and "uv's output lacks" in result.problem and "pandas" in result.problem


@pytest.mark.parametrize("name", ["numpy\n", "numpy-", "torch.", "typing_"])  # PEP 508: no separator at the end
def test_an_upgrade_package_is_a_package_name_before_uv_is_asked(tmp_path: Path, pypi_cell: Cell, name: str) -> None:
    # Before: `^...$` took "numpy\n" ('$' matches before a final newline) and "numpy-", and uv was run with them.
    asked: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, "uv 0.4.0\n", "")

    with pytest.raises(InputError) as caught:
        lock.lock_cells(tmp_path, [pypi_cell], PIP, Runner(run=run), upgrade=["numpy", name], say=lambda _: None)
    [problem] = caught.value.problems
    assert problem.where == "--upgrade-package" and problem.message.startswith(f"{name!r} is ")
    assert asked == [] and not any(tmp_path.iterdir())


def test_bad_flags_and_a_missing_uv_are_clear_errors(tmp_path: Path, pypi_cell: Cell) -> None:
    with pytest.raises(InputError, match="--upgrade-package: 'torch; rm' is not a package name"):
        lock.lock_cells(tmp_path, [pypi_cell], PIP, fake_uv(), upgrade=["torch; rm"])
    for value in ("0", "-3", "soon", "1e9"):
        with pytest.raises(InputError, match="--timeout"):
            lock.timeout_from_flag(value)
    assert lock.timeout_from_flag("12.5") == 12.5
    # float() reads these as 30, 30, 100 and 30: ASCII digits only, as every number typed on a command line.
    for value in ("\uff13\uff10", "\u0663\u0660", "1e2", " 30", "30\n", "nan", "inf"):
        with pytest.raises(InputError, match="--timeout"):
            lock.timeout_from_flag(value)

    def no_uv(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(InputError, match="uv: not found on PATH"):
        lock.lock_cells(tmp_path, [pypi_cell], PIP, Runner(run=no_uv))


def test_a_locked_cell_installs_from_its_lock_with_hashes_and_says_so(
    repo_copy: Path, matrix: Matrix, pypi_cell: Cell
) -> None:
    env = environment(repo_copy)
    locked = render_cell(env, matrix, pypi_cell, locked=True)
    unlocked = render_cell(env, matrix, pypi_cell, locked=False)
    flags = "--no-deps --require-hashes --only-binary=:all:"
    for name in ("pip.lock", "framework.lock", "requirements.lock"):
        assert f"source=pytorch/{PYPI_CELL[1]}/{name},target=/mnt/{name}" in locked
        assert f"{flags} -r /mnt/{name}" in locked
    assert "pip check" in locked and 'io.dlimages.locked="true"' in locked
    assert "/opt/venv/requirements.lock" in locked
    assert "--require-hashes" not in unlocked and 'io.dlimages.locked="false"' in unlocked
    assert "NOT LOCKED" in unlocked


def test_a_locked_pypi_cell_installs_its_framework_and_package_set_with_uv(
    repo_copy: Path, matrix: Matrix, pypi_cell: Cell
) -> None:
    """uv from the build context `uv`, the same hash-checked flags as pip, bytecode compiled after it, the CA and the
    mirror's index pip would use; pip itself (pip.lock) still installs first, and `pip check` still runs last."""
    locked = render_cell(environment(repo_copy), matrix, pypi_cell, locked=True)
    steps = {
        name: next(step for step in locked.split("\nRUN ") if f"/mnt/{name}" in step) for name in pythonlock.LOCK_FILES
    }
    uv = "setpriv --reuid=1000 --regid=1000 --clear-groups /mnt/uv pip install --python /opt/venv/bin/python"
    for name in ("framework.lock", "requirements.lock"):
        step = steps[name]
        assert "--mount=type=bind,from=uv,source=uv,target=/mnt/uv" in step
        assert "--mount=type=cache,target=/mnt/uv-cache,uid=1000,gid=1000" in step and ".cache/pip" not in step
        assert f"{uv} --no-config --cache-dir /mnt/uv-cache --link-mode copy --no-deps " in step
        # The bytecode: not uv's, whose bytes change from build to build; dl-compile's, one process, one order.
        assert (
            "--compile-bytecode" not in step
            and "--mount=type=bind,source=assets/dl-compile,target=/mnt/dl-compile" in step
        )
        compile_ = "setpriv --reuid=1000 --regid=1000 --clear-groups env PYTHONHASHSEED=0 /opt/venv/bin/python"
        assert f"\n && rm -f /opt/venv/.lock \\\n && {compile_} /mnt/dl-compile \\\n" in step
        assert f"--no-deps --require-hashes --only-binary=:all: -r /mnt/{name}" in step
        assert "SSL_CERT_FILE=/mnt/secrets/pip_ca" in step
        assert 'export UV_DEFAULT_INDEX="${PIP_INDEX_URL}"' in step
        assert "--clear-groups pip install" not in step
        assert f"-r /mnt/{name} \\\n && rm -f /opt/venv/.lock \\\n" in step  # uv's world-writable lock file
    assert "from=uv" not in steps["pip.lock"] and "-m pip install --no-cache-dir --no-deps" in steps["pip.lock"]
    assert "pip check" in steps["requirements.lock"]
    unlocked = render_cell(environment(repo_copy), matrix, pypi_cell, locked=False)
    assert "from=uv" not in unlocked and "/mnt/uv" not in unlocked


def test_uv_is_for_locks_from_one_index_only(matrix: Matrix, pypi_cell: Cell) -> None:
    torch_index = next(cell for cell in expand(matrix).cells if cell.install.index_url)
    assert pythonlock.installs_with_uv(pypi_cell, True) and not pythonlock.installs_with_uv(pypi_cell, False)
    assert not pythonlock.installs_with_uv(torch_index, True)  # pip: the hash, not the first index, picks each file


def test_render_keeps_the_locks_and_renders_locked_cells_from_them(repo_copy: Path, pypi_cell: Cell) -> None:
    project = Project(repo_copy)
    project.write_rendered()
    dockerfile = repo_copy / pypi_cell.dockerfile
    assert "NOT LOCKED" in dockerfile.read_text()
    files = pythonlock.lock_files(
        pypi_cell, pythonlock.lock_input(pypi_cell, PIP), pythonlock.parse_compiled(UV_OUTPUT), "uv 0.13.9"
    )
    write_state(repo_copy, pypi_cell, files)
    changed, _ = project.write_rendered()
    assert changed == [f"wrote {pypi_cell.dockerfile}"]
    assert "--require-hashes" in dockerfile.read_text()
    assert (layout.cell_dir(repo_copy, pypi_cell) / "requirements.lock").read_text() == files["requirements.lock"]
    assert project.check_rendered() > 0


def test_a_real_resolver_that_never_answers_is_killed_at_the_time_limit(
    tmp_path: Path, pypi_cell: Cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is real, not a fake's promise: a `uv` that sleeps forever is stopped after --timeout seconds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "uv 0.13.9"; exit 0; fi\nexec sleep 600\n')
    uv.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    start = time.monotonic()
    [result] = lock.lock_cells(tmp_path, [pypi_cell], PIP, Runner(), timeout=1, say=lambda _: None)
    assert time.monotonic() - start < 10
    assert "did not resolve within 1 s" in result.problem
