"""What dl-smoke and dl-bench promise alike as commands, without a GPU: they start from the source tree and as
images install them (dl_stack.py, dl_command.py and their own parts beside them in /usr/local/bin), skip with 77,
refuse bad input with 2, and stay standalone Python 3.8."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from payload_scripts import BENCH, MODULES, SMOKE, install_like_an_image, run_script

COMMANDS = [("dl-smoke", SMOKE), ("dl-bench", BENCH)]


@pytest.mark.parametrize(("command", "script"), COMMANDS)
def test_starts_as_images_install_it_with_its_modules_beside_it(command: str, script: Path, tmp_path: Path) -> None:
    installed = install_like_an_image(script, command, tmp_path)
    started = run_script(installed, "--help")
    assert (started.returncode, started.stdout.split(" [")[0]) == (0, f"usage: {command}"), started.stderr
    # The modules it imports are those sibling files and nothing else: without one the command cannot start.
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
        (BENCH, ["--batch-size", "amp_fp16=0"], "--batch-size amp_fp16 must be a positive integer up to 65536"),
        (BENCH, ["--iters", "0"], "--iters must be from 1 to 100000, got 0"),
        (BENCH, ["--warmup", "x"], "argument --warmup: 'x' is not a whole number"),
        (BENCH, ["--iters", "\u0663"], "argument --iters: '\u0663' is not a whole number"),  # ASCII digits only
        (SMOKE, ["--steps", "\u0663\u0660"], "argument --steps: '\u0663\u0660' is not a whole number"),
        (BENCH, ["--batch-size", "\u0661\u0662\u0668"], "--batch-size must be a positive integer up to 65536"),
        # Huge numbers: usage errors at once, never a run that ends as "skipped" (77) without a GPU, or an overflow.
        (SMOKE, ["--steps", "99999999999999999999"], "--steps must be at most 10000, got 99999999999999999999"),
        (SMOKE, ["--expect-cuda", "twelve"], "--expect-cuda 'twelve' is not a version"),
        (SMOKE, ["--expect-framework-version", ""], "--expect-framework-version '' is not a version"),
        (BENCH, ["--batch-size", str(10**30)], f"--batch-size must be a positive integer up to 65536, got '{10**30}'"),
        (BENCH, ["--iters", "99999999999999999999"], "--iters must be from 1 to 100000, got 99999999999999999999"),
        (BENCH, ["--warmup", "100001"], "--warmup must be from 1 to 100000, got 100001"),
        (BENCH, ["--gpus", "0"], "--gpus must be a positive integer up to 1024, got '0'"),
        (BENCH, ["--gpus", "all", "--modes", "fp32,bf16_cl"], "--gpus runs DDP in one mode; got fp32, bf16_cl"),
    ],
)
def test_usage_errors_exit_2(script: Path, args: list[str], message: str) -> None:
    result = run_script(script, *args)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert message in result.stderr


def test_bench_refuses_an_out_file_it_could_not_write_before_running(tmp_path: Path) -> None:
    for out, why in ((tmp_path / "missing" / "bench.json", "No such file or directory"), (tmp_path, "Is a directory")):
        result = run_script(BENCH, "--out", str(out))
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
        assert f"dl-bench: error: --out {out}: cannot write there ({why})" in result.stderr
    assert list(tmp_path.iterdir()) == []  # the check leaves nothing behind


@pytest.mark.parametrize("script", MODULES, ids=lambda path: path.name)
def test_payload_is_standalone_and_python_3_8_syntax(script: Path) -> None:
    tree = ast.parse(script.read_text(), feature_version=(3, 8))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.startswith("dlimages") for name in imported)
    # The standard library, the frameworks under test, and the modules beside it ("" is the package's `from . import`).
    outside = {name.split(".")[0] for name in imported} - set(sys.stdlib_module_names)
    assert outside <= {"", "torch", "torchvision", "pynvml", *(module.stem for module in MODULES)}
