"""What the payload tests share: where dl-smoke, dl-bench and the modules they import live, ways to run a script as a
plain file without a GPU, from the source tree or installed as an image installs it, and worker targets for the
one-process-per-GPU launcher (dl_stack.run_workers) that behave as GPU workers do when they fail."""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PAYLOAD = Path(__file__).resolve().parents[2] / "src" / "dlimages" / "payload"
SMOKE = PAYLOAD / "dl_smoke.py"
BENCH = PAYLOAD / "dl_bench.py"
STACK = PAYLOAD / "dl_stack.py"
# What both commands import; each command's own parts are dl_smoke_*.py and dl_bench_*.py.
SHARED = (STACK, PAYLOAD / "dl_workers.py", PAYLOAD / "dl_command.py")
MODULES = sorted(PAYLOAD.glob("dl_*.py"))  # the commands and every module they import

# The scripts' skip paths (exit 77) run through torch; without it they exit 2.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (pip install torch)")


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a payload script as a plain file, with the same Python, every GPU hidden: the skip path on every host."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def run_main(
    module: ModuleType, args: Sequence[str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess[str]:
    """A script's main(args) in this process, every GPU hidden: what running it as a file does, without starting
    Python and importing torch again (the tests that run the file itself are the image-layout ones)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = module.main(list(args))
    captured = capfd.readouterr()
    return subprocess.CompletedProcess([module.__name__, *args], code, captured.out, captured.err)


def parts(script: Path) -> list[Path]:
    """The modules `script` imports beside it: the shared ones and its own dl_<command>_*.py."""
    return [*SHARED, *sorted(PAYLOAD.glob(f"{script.stem}_*.py"))]


def install_like_an_image(script: Path, command: str, folder: Path) -> Path:
    """Copy `script` into `folder` as `command` with the modules it imports beside it, as images lay out
    /usr/local/bin (only its own parts: a TensorFlow image has dl-smoke's, not dl-bench's)."""
    installed = folder / command
    shutil.copy2(script, installed)
    for module in parts(script):
        shutil.copy2(module, folder / module.name)
    return installed


# Worker targets for dl_workers.run_workers: module-level, so that each spawned process imports them again by name.


def worker_answers(rank: int, world: int, workdir: str, note: Callable[..., None], value: str) -> dict[str, Any]:
    note("working", {"half": True})
    print(f"rank {rank} says hello", flush=True)
    names = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")
    return {"rank": rank, "world": world, "value": value, "env": {name: os.environ.get(name) for name in names}}


def worker_fails_on_rank_1(rank: int, world: int, workdir: str, note: Callable[..., None]) -> None:
    note("all_reduce")
    if rank == 1:
        raise RuntimeError("NCCL error: unhandled cuda error")
    time.sleep(600)  # waits for rank 1 as a collective would


def worker_aborts_like_cudnn_8(rank: int, world: int, workdir: str, note: Callable[..., None]) -> None:
    note("convolution")
    os.write(2, (CUDNN_8_MISSING_SUBLIBRARY + "\n").encode())
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file left behind
    os.abort()


def worker_hangs(rank: int, world: int, workdir: str, note: Callable[..., None]) -> None:
    note("all_reduce")
    time.sleep(600)


CUDNN_8_MISSING_SUBLIBRARY = (
    "Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_cnn_infer.so.8: cannot open shared object "
    "file: No such file or directory\nPlease make sure libcudnn_cnn_infer.so.8 is in your library path!"
)
