"""dl_workers.run_workers, the one-process-per-GPU launcher dl-smoke and dl-bench share, on the CPU: fresh processes
that inherit the environment, results by rank, and how a worker that raises, aborts or hangs is reported. Then the
multi-GPU smoke's own workers end to end over gloo on the CPU (the same code runs over NCCL in tests/gpu)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from payload_scripts import (
    CUDNN_8_MISSING_SUBLIBRARY,
    STACK,
    needs_torch,
    worker_aborts_like_cudnn_8,
    worker_answers,
    worker_fails_on_rank_1,
    worker_hangs,
)

from dlimages.payload import dl_smoke_pytorch as smoke_torch
from dlimages.payload import dl_smoke_rules as rules
from dlimages.payload import dl_smoke_training as training
from dlimages.payload import dl_workers as workers

pytestmark = pytest.mark.slow  # each test starts Python processes


def test_workers_answer_by_rank_with_the_environment_passed_through(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the lent multi-GPU machines set: NVLink multicast stays off in every worker.
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    outcomes = workers.run_workers(worker_answers, 2, ("hi",), timeout_s=60)
    env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    assert [(o.rank, o.state, o.value, o.stage) for o in outcomes] == [
        (rank, "ok", {"rank": rank, "world": 2, "value": "hi", "env": env}, "working") for rank in (0, 1)
    ]
    assert [o.output for o in outcomes] == ["rank 0 says hello\n", "rank 1 says hello\n"]
    assert {k: v for k, v in workers.collective_environment().items() if k in env} == env


def test_a_worker_that_raises_is_named_and_the_ones_waiting_for_it_are_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "FAILURE_GRACE_S", 1.0)
    waiting, failed = workers.run_workers(worker_fails_on_rank_1, 2, timeout_s=60)
    assert (failed.state, failed.error, failed.stage) == (
        "error",
        "RuntimeError: NCCL error: unhandled cuda error",
        "all_reduce",
    )
    assert (waiting.state, waiting.error, waiting.stage) == (
        "stopped",
        "stopped after another worker failed",
        "all_reduce",
    )
    assert workers.describe_worker_failures([waiting, failed], ["H200", "H200"]) == (
        "GPU 1 (H200) failed in all_reduce: RuntimeError: NCCL error: unhandled cuda error; "
        "then stopped: GPU 0 (in all_reduce)"
    )


def test_a_worker_cudnn_aborts_is_reported_as_cudnn_not_loaded() -> None:
    [outcome] = workers.run_workers(worker_aborts_like_cudnn_8, 1, timeout_s=60)
    assert (outcome.state, outcome.error, outcome.stage) == ("died", "killed by SIGABRT", "convolution")
    check, _ = smoke_torch.cudnn_load_check(outcome, "GPU 0 (A100)", str)
    assert check == rules.Check(
        "cudnn_load",
        "fail",
        "cuDNN could not be loaded: libcudnn_cnn_infer.so.8: cannot open shared object file: No such file or "
        "directory (the test process killed by SIGABRT, at convolution)",
    )
    assert CUDNN_8_MISSING_SUBLIBRARY.splitlines()[0] in outcome.output


def test_workers_still_running_at_the_deadline_are_stopped_and_placed() -> None:
    outcomes = workers.run_workers(worker_hangs, 2, timeout_s=4)  # a worker starts and notes its stage in < 1 s
    assert [(o.state, o.stage) for o in outcomes] == [("timeout", "all_reduce")] * 2
    assert outcomes[0].error.startswith("still running after ")


def test_a_script_installed_without_py_starts_workers_of_its_own(tmp_path: Path) -> None:
    # dl-smoke lives in /usr/local/bin without a .py: spawn must import it again in each worker.
    for module in (STACK, STACK.with_name("dl_workers.py")):
        (tmp_path / module.name).write_text(module.read_text())
    script = tmp_path / "dl-try"
    script.write_text(
        "import json, dl_workers\n"
        "def work(rank, world, workdir, note):\n"
        "    return rank * 10\n"
        "if __name__ == '__main__':\n"
        "    print(json.dumps([o.value for o in dl_workers.run_workers(work, 3, timeout_s=60)]))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "[0, 10, 20]"), done.stderr


GLOO = {"backend": "gloo", "device": "cpu", "dtype": None, "steps": 6, "channels_last": False, "elements": 1024,
        "timeout_s": 120}  # fmt: skip


@needs_torch
def test_the_multi_gpu_smoke_workers_end_to_end_over_gloo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    outcomes = smoke_torch.run_multi_gpu(training.multi_gpu_worker, 2, GLOO)
    checks: dict[str, Any] = {
        c.name: c for c in smoke_torch.summarize_multi_gpu(outcomes, ["cpu", "cpu"], GLOO, [], None)
    }
    assert (checks["nccl_allreduce"].status, checks["ddp_train"].status) == ("pass", "pass"), checks
    assert checks["ddp_train"].detail.endswith("replicas identical")
    links = smoke_torch.link_checks(smoke_torch.run_multi_gpu(training.pair_worker, 3, GLOO), ["cpu"] * 3)
    assert [(c.name, c.status) for c in links] == [(f"nccl_link[{p}]", "pass") for p in ("0-1", "0-2", "1-2")]
