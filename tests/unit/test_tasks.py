"""The Invoke tasks as a user runs them: `python -m invoke ...` from the repo root, exit codes and output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.project import Project

REPO = Path(__file__).resolve().parents[2]
IMAGE = "lab/pytorch-universal-dev"


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def test_build_dry_run_prints_the_command_and_both_tags() -> None:
    result = invoke("build", "--cuda", "11.8", "--torch", "2.1", "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "docker buildx build " in out
    assert "--file images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile" in out
    assert f"{IMAGE}:v1.0-cuda11.8-torch2.1.2-py3.10-runtime\n" in out
    assert out.rstrip().endswith(f" {IMAGE}:v1.0")
    assert out.count("docker buildx build") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--cuda", "11.7"],
            "error: --cuda: unknown CUDA version '11.7' (allowed: ",  # the lists: test_selection.py
            id="cuda",
        ),
        pytest.param(
            ["--torch", "9.9"],
            "error: --torch: no release matches '9.9' (allowed: ",
            id="torch",
        ),
        pytest.param(
            ["--cuda", "11.0", "--torch", "2.1"],
            "error: --cuda 11.0 --torch 2.1: no valid cell matches this selection: PyTorch 2.1.2 was published for "
            "CUDA 11.8, 12.1, not 11.0",
            id="impossible",
        ),
        pytest.param(
            ["--torch", "2.1", "--tf", "2.14"], "error: --torch/--tf: choose one framework per build", id="both"
        ),
        pytest.param(["--mirror", "tsinghua"], "error: --mirror: unknown mirror profile 'tsinghua'", id="mirror"),
        pytest.param(
            ["--ca-bundle", "/nonexistent/ca.pem"],
            "error: --ca-bundle: no such file: /nonexistent/ca.pem",
            id="ca-bundle",
        ),
    ],
)
def test_build_refuses_bad_input_with_exit_2_and_no_traceback(args: list[str], message: str) -> None:
    result = invoke("build", *args, "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stdout + result.stderr
    assert "docker buildx" not in result.stdout


def test_matrix_json_describes_every_cell() -> None:
    result = invoke("matrix", "--json")
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)
    assert isinstance(cells, list) and cells  # which cells: tests/unit/snapshots/matrix.json
    keys = {
        "image",
        "tags",
        "cuda",
        "cudnn",
        "framework",
        "framework_version",
        "python",
        "flavor",
        "base_image",
        "min_driver",
        "dockerfile",
    }
    for cell in cells:
        assert keys <= set(cell), cell
        assert isinstance(cell["tags"], list) and cell["tags"]
        assert cell["framework_version"].count(".") == 2  # the full release, not the partial flag
        assert (REPO / cell["dockerfile"]).is_file()
    [default] = [c for c in cells if "v1.0" in c["tags"] and c["framework"] == "pytorch"]
    assert (default["cuda"], default["framework_version"], default["python"], default["min_driver"]) == (
        "11.8",
        "2.1.2",
        "3.10",
        "520.61.05",
    )


def _counts() -> tuple[int, int]:
    """The real matrix's numbers of valid cells and excluded combinations (the cells: snapshots/matrix.json)."""
    expansion = Project(REPO).expansion
    return len(expansion.cells), len(expansion.excluded)


def test_matrix_table_lists_the_cells() -> None:
    result = invoke("matrix")
    assert result.returncode == 0, result.stderr
    assert "v1.0-cuda11.8-torch2.1.2-py3.10-runtime, v1.0" in result.stdout
    cells, excluded = _counts()
    assert f"\n{cells} valid cells; `invoke matrix --explain` shows the {excluded} excluded.\n" in result.stdout


def test_matrix_explain_lists_the_exclusions() -> None:
    result = invoke("matrix", "--explain")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "PyTorch 2.1.2 + CUDA 11.0 + Python 3.10 (runtime): excluded\n"
        "    - PyTorch 2.1.2 was published for CUDA 11.8, 12.1, not 11.0 [cuda-build;" in out
    )
    assert "TensorFlow 2.4.4 + CUDA 11.0 + Python 3.10 (runtime): excluded" in out
    assert "[no-duplicate-cuda;" in out and "[base-image;" in out and "[python-wheel;" in out
    cells, excluded = _counts()
    assert out.rstrip().endswith(f"\n\n{cells} valid cells, {excluded} combinations excluded.")


def test_render_check_passes_on_the_repo() -> None:
    result = invoke("render", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("images/ is up to date (")


@pytest.mark.parametrize(
    ("task", "flags"),
    [
        ("matrix", ["--json", "--explain"]),
        ("render", ["--check"]),
        (
            "build",
            ["--cuda", "--torch", "--tf", "--python", "--flavor", "--mirror", "--dry-run", "--ca-bundle", "--netrc"],
        ),
    ],
)
def test_every_task_and_flag_has_help(task: str, flags: list[str]) -> None:
    result = invoke(task, "--help")
    assert result.returncode == 0, result.stderr
    assert f"Usage: inv[oke] [--core-opts] {task}" in result.stdout
    docstring, options = result.stdout.split("Docstring:", 1)[1].split("Options:", 1)
    assert docstring.strip(), f"{task} has no docstring"
    for flag in flags:
        # e.g. "  -c STRING, --cuda=STRING        CUDA version, e.g. 11.8 ...": help text follows the flag.
        pattern = rf"^\s+(-\w( STRING)?, )?{flag}(=STRING)?\s{{2,}}\S"
        assert re.search(pattern, options, re.MULTILINE), f"{task} {flag} has no help text"
