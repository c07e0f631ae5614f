"""The in-image payload commands (dl-smoke, dl-bench) on a real GPU, run as plain scripts.

Without a GPU every test here is reported SKIPPED with the reason, never passed; the multi-GPU ones skip likewise
with fewer than two GPUs. Nothing here needs dlimages installed: the scripts import the modules beside them, and the
one test that calls the arch rule loads that file.

The cuDNN test renames cuDNN's library files for a moment (and restores them): it runs only where
DLIMAGES_GPU_HIDE_CUDNN=1 says the machine may be treated so, e.g. a throwaway one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
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


def _checks(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    assert result.stdout.strip(), f"no report (exit {result.returncode}); stderr:\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout)
    return {c["name"]: c for c in report["checks"]}


def _gpu_count() -> int:
    return int(_torch_or_skip().cuda.device_count())


def _two_gpus_or_skip() -> int:
    count = _gpu_count()
    if count < 2:
        pytest.skip(f"needs 2 or more GPUs; {count} visible")
    return count


def test_smoke_passes_with_json() -> None:
    result = _run(SMOKE, "--json")
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert (result.returncode, report["status"], failed) == (0, "passed", [])
    assert report["gpus"], "a passing run must list the GPUs it used"
    trained = {c["name"] for c in report["checks"] if c["status"] == "pass"}
    assert "train_amp_fp16[0]" in trained


def test_smoke_human_summary_passes() -> None:
    result = _run(SMOKE, "--no-multi-gpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("RESULT passed (exit 0)")


def test_smoke_names_a_cudnn_mismatch() -> None:
    result = _run(SMOKE, "--json", "--expect-cudnn", "1.0", "--steps", "6", "--no-multi-gpu")
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


@pytest.mark.parametrize("layout", [[], ["--channels-last"]], ids=["nchw", "channels_last"])
def test_smoke_trains_the_conv_model_through_cudnn(layout: list[str]) -> None:
    result = _run(SMOKE, "--json", "--no-multi-gpu", *layout)
    checks = _checks(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert checks["cudnn_load"]["status"] == "pass"
    gpu = _torch_or_skip().cuda.get_device_name(0)
    assert checks["cudnn_load"]["detail"].endswith(f"a convolution ran forward and backward on GPU 0 ({gpu})")
    model = "conv + batch norm, channels_last" if layout else "conv + batch norm"
    for name in ("train_amp_fp16[0]", "train_amp_bf16[0]"):
        if checks[name]["status"] != "skip":
            assert (checks[name]["status"], checks[name]["detail"].endswith(f"({model})")) == ("pass", True)


HIDE_CUDNN = "DLIMAGES_GPU_HIDE_CUDNN"
_MAPPED_CUDNN = (
    "import torch\n"
    "conv = torch.nn.Conv2d(3, 8, 3).cuda()\n"
    "conv(torch.randn(2, 3, 8, 8, device='cuda')).sum().backward()\n"
    "torch.cuda.synchronize()\n"
    "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcudnn' in l})))\n"
)


def _cudnn_files() -> list[Path]:
    """Every cuDNN library file beside the ones torch maps for a convolution, and those ldconfig knows."""
    mapped = subprocess.run([sys.executable, "-c", _MAPPED_CUDNN], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert mapped.returncode == 0, mapped.stderr
    folders = {Path(path).parent for path in mapped.stdout.split()}
    known = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    folders |= {Path(line.split("=>")[-1].strip()).parent for line in known.splitlines() if "libcudnn" in line}
    return sorted({path for folder in folders for path in folder.glob("libcudnn*.so*")})


@contextlib.contextmanager
def _hidden(files: list[Path]) -> Iterator[None]:
    """The files renamed out of the loader's way, and back again whatever happens."""
    moved = []
    try:
        for path in files:
            path.rename(path.with_name(path.name + ".hidden-by-test"))
            moved.append(path)
        yield
    finally:
        for path in moved:
            path.with_name(path.name + ".hidden-by-test").rename(path)


@pytest.mark.skipif(os.environ.get(HIDE_CUDNN) != "1", reason=f"renames cuDNN's files: set {HIDE_CUDNN}=1 to allow")
@pytest.mark.parametrize("hide", ["sub-libraries", "all"])
def test_smoke_names_cudnn_when_its_libraries_are_hidden(hide: str) -> None:
    files = _cudnn_files()
    assert files, "found no libcudnn*.so* to hide"
    # cuDNN 8 and 9 are a small libcudnn.so.N that loads sub-libraries (libcudnn_cnn*, libcudnn_engines*, ...) when
    # first used; without libcudnn.so.N itself torch does not even import.
    chosen = [f for f in files if f.name.startswith("libcudnn_")] if hide == "sub-libraries" else files
    with _hidden(chosen):
        result = _run(SMOKE, "--json", "--no-multi-gpu", "--steps", "6")
    checks = _checks(result)
    assert (result.returncode, checks["cudnn_load"]["status"]) == (1, "fail"), result.stdout + result.stderr
    # Both name a library: torch's import names libcudnn.so.N; cuDNN 9 dies silently without a sub-library, and
    # dl-smoke names the ones missing beside libcudnn.so.N.
    assert checks["cudnn_load"]["detail"].startswith("cuDNN could not be loaded: libcudnn"), checks["cudnn_load"]
    assert not any(name.startswith("train_amp") for name in checks)


def test_multi_gpu_smoke_all_reduces_and_trains_ddp_on_every_gpu() -> None:
    count = _two_gpus_or_skip()
    result = _run(SMOKE, "--json", "--steps", "10")
    checks = _checks(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert checks["nccl_allreduce"]["status"] == "pass"
    assert checks["nccl_allreduce"]["detail"].startswith(f"{count} GPUs summed 16 MiB float32 each correctly")
    assert checks["ddp_train"]["status"] == "pass"
    assert checks["ddp_train"]["detail"].endswith("replicas identical")


def test_bench_gpus_all_reports_bus_bandwidth_and_scaling() -> None:
    count = _gpu_count()
    result = _run(BENCH, "--gpus", "all", "--warmup", "3", "--iters", "5", "--batch-size", "64", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    multi = json.loads(result.stdout)["multi_gpu"]
    assert [(row["size"], row["status"]) for row in multi["allreduce"]] == [
        (size, "ok" if count > 1 else "skipped") for size in ("16 MiB", "128 MiB", "1 GiB")
    ]
    ddp = multi["ddp"]
    assert (ddp["mode"], ddp["batch_size_per_gpu"], ddp["one_gpu"]["status"]) == ("bf16_cl", 64, "ok")
    if count > 1:
        assert all(row["busbw_gbps"] > 0 for row in multi["allreduce"])
        assert ddp["all_gpus"]["gpus"] == count and ddp["all_gpus"]["images_per_s"] > ddp["one_gpu"]["images_per_s"]
        assert 0.5 < ddp["scaling_efficiency"] < 1.1
    else:
        assert (ddp["all_gpus"], ddp["scaling_efficiency"]) == (None, None)
