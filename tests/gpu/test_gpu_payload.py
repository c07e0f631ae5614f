"""The in-image payload commands (dl-smoke, dl-bench) on a real GPU, run as plain scripts.

Without a GPU every test here is reported SKIPPED with the reason, never passed. Nothing here needs dlimages
installed: the scripts import dl_stack.py beside them, and the one test that calls the arch rule loads that file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

PAYLOAD = Path(__file__).resolve().parents[2] / "src" / "dlimages" / "payload"
SMOKE = PAYLOAD / "dl_smoke.py"
BENCH = PAYLOAD / "dl_bench.py"
STACK = PAYLOAD / "dl_stack.py"
TIMEOUT_S = 600  # torch import, CUDA init and cuDNN autotuning take a while on a cold machine


def _torch_or_skip() -> Any:
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except Exception as error:
        pytest.skip(f"torch is not importable here ({type(error).__name__})")
    if not torch.cuda.is_available():
        pytest.skip("no GPU visible (torch.cuda.is_available() is False)")
    return torch


@pytest.fixture(autouse=True)
def _require_gpu() -> None:
    _torch_or_skip()


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_smoke_passes_with_json() -> None:
    result = _run(SMOKE, "--json")
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert (result.returncode, report["status"], failed) == (0, "passed", [])
    assert report["gpus"], "a passing run must list the GPUs it used"
    trained = {c["name"] for c in report["checks"] if c["status"] == "pass"}
    assert "train_amp_fp16[0]" in trained


def test_smoke_human_summary_passes() -> None:
    result = _run(SMOKE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("RESULT passed (exit 0)")


def test_smoke_names_a_cudnn_mismatch() -> None:
    result = _run(SMOKE, "--json", "--expect-cudnn", "1.0", "--steps", "6")
    report = json.loads(result.stdout)
    cudnn = next(c for c in report["checks"] if c["name"] == "cudnn_version")
    assert (result.returncode, cudnn["status"]) == (1, "fail")
    assert "cuDNN version mismatch" in cudnn["detail"]


def test_arch_rule_accepts_this_gpu() -> None:
    torch = _torch_or_skip()
    stack = _load(STACK)
    capability = tuple(torch.cuda.get_device_capability(0))
    assert stack.kernel_for_capability(capability, torch.cuda.get_arch_list()) is not None


def test_bench_short_run_reports_throughput_and_memory() -> None:
    result = _run(BENCH, "--modes", "fp32,amp_fp16", "--batch-size", "32", "--warmup", "2", "--iters", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["mode"]: row for row in report["modes"]}
    assert rows["fp32"]["images_per_s"] > 0 and rows["fp32"]["peak_mem_gib"] > 0
    # AMP at the same batch must need less memory than FP32: activations are half the size.
    assert rows["amp_fp16"]["mem_saving_vs_fp32"] > 1.0
    assert report["environment"]["gpu"]
