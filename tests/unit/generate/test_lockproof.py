"""The proof that a lock works (generate/lockproof), without installing anything: which Python, which commands in
which order, how the probe's answer is judged, and that runtime and devel cells sharing one lock are proved once.
The real installs run in tests/image/test_lock_proof.py and `invoke lock --prove`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts.layout import cell_dir
from dlimages.artifacts.pythonlock import FRAMEWORK_LOCK, LOCK, PIP_LOCK
from dlimages.core.runner import Runner
from dlimages.generate import lockproof
from dlimages.model.cells import Cell

TORCH_CELL = ("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")


@pytest.fixture
def torch_cell(cell: Callable[[str, str], Cell]) -> Cell:
    return cell(*TORCH_CELL)


def _answer(version: str, value: float = 8.0) -> str:
    return "some warning on stdout\n" + json.dumps({"version": version, "value": value}) + "\n"


def test_the_probe_must_show_the_cells_version_computing_the_right_value(torch_cell: Cell) -> None:
    assert lockproof.judge(torch_cell, _answer("2.1.2")) == (True, "pytorch 2.1.2 imports and computes on the CPU")
    assert lockproof.judge(torch_cell, _answer("2.1.2+cu121"))[0], "a local version tag names the same release"
    assert lockproof.judge(torch_cell, _answer("2.2.0")) == (False, "imported pytorch 2.2.0, not 2.1.2")
    assert lockproof.judge(torch_cell, _answer("2.1.2", 7.0)) == (False, "pytorch 2.1.2 computed 7.0, not 8.0")
    failed = "Traceback (most recent call last):\n  ...\nTypeError: Descriptors cannot be created directly.\n"
    assert lockproof.judge(torch_cell, failed) == (
        False,
        "Traceback (most recent call last): |   ... | TypeError: Descriptors cannot be created directly.",
    )


def test_the_cells_python_is_pyenvs_newest_patch_else_one_on_path(tmp_path: Path) -> None:
    for patch in ("3.8.9", "3.8.18", "3.10.13"):
        exe = tmp_path / "pyenv/versions" / patch / "bin" / f"python{patch.rsplit('.', 1)[0]}"
        exe.parent.mkdir(parents=True)
        exe.write_text("")
    on_path = tmp_path / "bin/python3.12"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    environ = {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": str(on_path.parent)}
    assert lockproof.cell_python("3.8", environ) == tmp_path / "pyenv/versions/3.8.18/bin/python3.8"
    assert lockproof.cell_python("3.12", environ) == on_path
    assert lockproof.cell_python("3.13", environ) is None


def test_the_locks_install_in_the_images_order_with_its_flags(tmp_path: Path, torch_cell: Cell) -> None:
    argvs = lockproof.install_argvs(tmp_path, torch_cell, tmp_path / "venv")
    assert [argv[-1] for argv in argvs] == [
        str(cell_dir(tmp_path, torch_cell) / n) for n in (PIP_LOCK, FRAMEWORK_LOCK, LOCK)
    ]
    for argv in argvs:
        assert argv[:3] == ["uv", "pip", "install"]
        assert {"--no-deps", "--require-hashes", "--only-binary=:all:", "--no-config"} <= set(argv)
        assert argv[argv.index("--python") + 1] == str(tmp_path / "venv/bin/python")
    built = dataclasses.replace(torch_cell, install=dataclasses.replace(torch_cell.install, source_builds=("wrapt",)))
    assert "--no-binary=wrapt" in lockproof.install_argvs(tmp_path, built, tmp_path / "venv")[0]


def _fake(probe_out: str, log: list[tuple[list[str], dict[str, Any]]]) -> Runner:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        log.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, probe_out if "-c" in argv else "", "")

    return Runner(run=run)


def test_cells_sharing_one_lock_are_proved_once_without_a_gpu(
    tmp_path: Path, cell: Callable[[str, str], Cell], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, other = cell(*TORCH_CELL), cell("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime")
    devel = dataclasses.replace(runtime, flavor="devel")
    for each, body in ((runtime, "torch==2.1.2 \\\n"), (devel, "torch==2.1.2 \\\n"), (other, "torch==2.1.2 \\\n  x\n")):
        folder = cell_dir(tmp_path, each)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LOCK).write_text(f"# Cell: {each.slug}\n{body}")
    monkeypatch.setattr(lockproof, "cell_python", lambda version: Path(f"/usr/bin/python{version}"))
    log: list[tuple[list[str], dict[str, Any]]] = []
    said: list[str] = []
    proofs = lockproof.prove_cells(
        tmp_path, [runtime, devel, other], _fake(_answer("2.1.2"), log), tmp_path, said.append
    )
    assert [p.ok for p in proofs] == [True, True, True]
    assert proofs[1].said == f"the lock of {runtime.slug}: pytorch 2.1.2 imports and computes on the CPU"
    probes = [kwargs for argv, kwargs in log if "-c" in argv]
    assert len(probes) == 2, "the devel cell's lock is the runtime's"
    assert all(kwargs["env"]["CUDA_VISIBLE_DEVICES"] == "" for kwargs in probes)
    assert len(said) == 2 and said[0].startswith(f"proved {runtime.slug} (")


def test_a_cell_without_its_python_fails_and_says_how_to_get_it(
    tmp_path: Path, torch_cell: Cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lockproof, "cell_python", lambda version: None)
    proof = lockproof.prove(tmp_path, torch_cell, _fake("", []), tmp_path)
    assert (proof.ok, proof.said) == (False, "no Python 3.10 here (pyenv install 3.10)")
