"""What dl-smoke and dl-bench promise alike as commands, without a GPU: they start from the source tree and as
images install them (dl_stack.py beside them in /usr/local/bin), skip with 77, refuse bad input with 2, and stay
standalone Python 3.8."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from payload_scripts import BENCH, SMOKE, STACK, install_like_an_image, run_script

COMMANDS = [("dl-smoke", SMOKE), ("dl-bench", BENCH)]


@pytest.mark.parametrize(("command", "script"), COMMANDS)
def test_starts_as_images_install_it_with_dl_stack_beside_it(command: str, script: Path, tmp_path: Path) -> None:
    installed = install_like_an_image(script, command, tmp_path)
    started = run_script(installed, "--help")
    assert (started.returncode, started.stdout.split(" [")[0]) == (0, f"usage: {command}"), started.stderr
    # The shared module is that sibling file and nothing else: without it the command cannot start.
    (tmp_path / "dl_stack.py").unlink()
    broken = run_script(installed, "--help")
    assert (broken.returncode, "No module named 'dl_stack'" in broken.stderr) == (1, True)


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (SMOKE, ["--framework", "caffe"], "invalid choice"),
        (SMOKE, ["--steps", "3"], "--steps must be at least 6"),
        (SMOKE, ["--cell-file", "/nonexistent/cell.json"], "cannot read cell file /nonexistent/cell.json"),
        (BENCH, ["--modes", "fp8"], "unknown mode(s) fp8"),
        (BENCH, ["--batch-size", "amp_fp16=0"], "--batch-size amp_fp16 must be a positive integer"),
        (BENCH, ["--iters", "0"], "--warmup and --iters must be at least 1"),
        (BENCH, ["--warmup", "x"], "invalid int value"),
    ],
)
def test_usage_errors_exit_2(script: Path, args: list[str], message: str) -> None:
    result = run_script(script, *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize("script", [SMOKE, BENCH, STACK], ids=lambda path: path.name)
def test_payload_is_standalone_and_python_3_8_syntax(script: Path) -> None:
    tree = ast.parse(script.read_text(), feature_version=(3, 8))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.startswith("dlimages") for name in imported)
    # The standard library, the frameworks under test, and dl_stack beside it ("" is the package's `from . import`).
    outside = {name.split(".")[0] for name in imported} - set(sys.stdlib_module_names)
    assert outside <= {"", "dl_stack", "torch", "torchvision", "pynvml"}
