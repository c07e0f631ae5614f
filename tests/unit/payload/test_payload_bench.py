"""dl-bench without a GPU: flag parsing, the memory-saving arithmetic, the built-in ResNet-50, the multi-GPU
arithmetic (bus bandwidth as nccl-tests defines it, scaling efficiency, the slowest rank's time) and report, and its
behaviour as a script (skip with 77; what it shares with dl-smoke is in test_payload_commands.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from payload_scripts import BENCH, install_like_an_image, needs_torch, run_main, run_script

from dlimages.payload import dl_bench as bench
from dlimages.payload import dl_bench_multigpu as multigpu
from dlimages.payload import dl_bench_training as bench_training
from dlimages.payload import dl_stack as stack
from dlimages.payload import dl_workers as workers


def _row(mode: str, batch: int, peak: float | None, status: str = "ok") -> dict[str, Any]:
    return {"mode": mode, "batch_size": batch, "peak_mem_gib": peak, "status": status}


def test_default_modes_leave_compile_out_and_flag_adds_it() -> None:
    assert bench.parse_modes(None, False) == ["fp32", "tf32", "amp_fp16", "amp_fp16_cl", "bf16_cl"]
    assert bench.parse_modes(None, True)[-1] == "compile"
    assert bench.parse_modes("bf16_cl,compile,bf16_cl", True) == ["bf16_cl", "compile"]


def test_unknown_mode_is_a_usage_error() -> None:
    with pytest.raises(stack.UsageError, match="unknown mode"):
        bench.parse_modes("fp32,fp8", False)


def test_batch_size_default_and_per_mode_override_in_any_order() -> None:
    modes = ["fp32", "amp_fp16_cl", "compile"]
    assert bench.parse_batch_sizes(None, modes) == {"fp32": 128, "amp_fp16_cl": 128, "compile": 128}
    sizes = bench.parse_batch_sizes(["amp_fp16_cl=256", "64"], modes)
    assert sizes == {"fp32": 64, "amp_fp16_cl": 256, "compile": 64}


@pytest.mark.parametrize("value", ["0", "x", "amp_fp16=-1", "fp64=128"])
def test_bad_batch_size_is_a_usage_error(value: str) -> None:
    with pytest.raises(stack.UsageError):
        bench.parse_batch_sizes([value], ["fp32"])


def test_memory_saving_of_amp_modes_against_fp32() -> None:
    # The H200 run of 2026-11-29.
    rows = [
        _row("fp32", 128, 15.82),
        _row("tf32", 128, 15.82),
        _row("amp_fp16", 128, 5.66),
        _row("amp_fp16_cl", 256, 11.01),
    ]
    bench.add_memory_savings(rows)
    saving = {r["mode"]: (r["mem_saving_vs_fp32"], r["mem_saving_vs_fp32_per_image"]) for r in rows}
    assert saving == {"fp32": (None, None), "tf32": (None, None), "amp_fp16": (2.8, 2.8), "amp_fp16_cl": (1.44, 2.87)}


def test_no_memory_saving_without_a_good_fp32_run() -> None:
    rows = [_row("fp32", 128, None, "oom"), _row("amp_fp16", 128, 5.66)]
    bench.add_memory_savings(rows)
    assert rows[1]["mem_saving_vs_fp32"] is None


def test_unsupported_modes_skip_but_errors_fail() -> None:
    assert bench_training.decide_outcome([_row("fp32", 1, 1.0), _row("compile", 1, None, "skipped")]) == ("passed", 0)
    assert bench_training.decide_outcome([_row("fp32", 1, None, "oom")]) == ("failed", 1)


def test_throughput_arithmetic() -> None:
    assert bench_training.images_per_second(128, 30, 3.84) == pytest.approx(1000.0)
    assert bench_training.images_per_second(128, 30, 0.0) == 0.0


@pytest.mark.parametrize(("value", "text"), [(8005, "8.0.5"), (8902, "8.9.2"), (90100, "9.1.0"), (91900, "9.19.0")])
def test_cudnn_version_text_handles_both_encodings(value: int, text: str) -> None:
    fake = SimpleNamespace(
        backends=SimpleNamespace(cudnn=SimpleNamespace(is_available=lambda: True, version=lambda: value))
    )
    assert bench_training.cudnn_version_text(fake) == text


def test_fp32_mode_turns_tf32_off_and_others_on() -> None:
    assert not bench.MODES["fp32"].tf32
    assert all(mode.tf32 for name, mode in bench.MODES.items() if name != "fp32")
    assert bench.MODES["compile"] == bench_training.Mode(
        "compile", "bfloat16", True, True, True, "AMP bf16 + channels_last + torch.compile"
    )


@pytest.mark.slow
@needs_torch
def test_builtin_resnet50_matches_torchvision_shape() -> None:
    import torch

    model = bench_training.builtin_resnet50(torch)
    # torchvision.models.resnet50() has exactly this many parameters.
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    with torch.no_grad():
        assert tuple(model.eval()(torch.zeros(1, 3, 64, 64)).shape) == (1, 1000)


@needs_torch
def test_no_gpu_skips_with_77(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    result = run_main(bench, ["--iters", "1"], monkeypatch, capfd)
    assert result.returncode == 77
    assert "no GPU visible" in result.stderr


@pytest.mark.slow
@needs_torch
def test_no_gpu_skips_with_77_as_json_as_images_install_it(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = run_script(install_like_an_image(BENCH, "dl-bench", tmp_path), "--json", "--out", str(out))
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"], report["exit_code"], report["modes"]) == (77, "skipped", 77, [])
    assert json.loads(out.read_text()) == report


def test_a_report_that_cannot_be_written_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # After the run (the disk filled up meanwhile, say): the report is still printed, --out is an error.
    report = {"status": "skipped", "exit_code": 77, "modes": []}
    args = SimpleNamespace(json=True, out=str(tmp_path))
    assert bench.emit(report, args) is False  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert json.loads(out) == report
    assert err == f"dl-bench: error: --out {tmp_path}: cannot write there (Is a directory)\n"


# --- --gpus all: all-reduce bus bandwidth and DDP scaling ---------------------------------------------------------


@pytest.mark.parametrize(("text", "gpus"), [("1", 1), ("all", None), ("ALL", None), ("8", 8)])
def test_gpus_flag_is_a_count_or_all(text: str, gpus: int | None) -> None:
    assert bench.parse_gpus(text) == gpus


@pytest.mark.parametrize("text", ["0", "-1", "two", "\u0662", "1025"])
def test_bad_gpus_flag_is_a_usage_error(text: str) -> None:
    with pytest.raises(stack.UsageError, match="--gpus must be a positive integer up to 1024"):
        bench.parse_gpus(text)


def test_ddp_runs_one_mode_bf16_channels_last_by_default() -> None:
    assert bench.multi_gpu_mode(None, False) == "bf16_cl"
    assert bench.multi_gpu_mode(None, True) == "compile"
    assert bench.multi_gpu_mode("amp_fp16_cl", False) == "amp_fp16_cl"
    with pytest.raises(stack.UsageError, match="--gpus runs DDP in one mode; got fp32, tf32"):
        bench.multi_gpu_mode("fp32,tf32", False)
    with pytest.raises(stack.UsageError, match="got fp32, compile"):
        bench.multi_gpu_mode("fp32", True)


def test_bus_bandwidth_is_nccl_tests_arithmetic() -> None:
    # busbw = algbw * 2(n-1)/n: equal on 2 GPUs, 1.75 times algbw on 8.
    assert multigpu.bus_bandwidth(10**9, 0.01, 2) == pytest.approx((100.0, 100.0))
    assert multigpu.bus_bandwidth(10**9, 0.01, 8) == pytest.approx((100.0, 175.0))
    assert multigpu.bus_bandwidth(10**9, 0.01, 1) == pytest.approx((100.0, 0.0))  # nothing crosses a link
    # The 2 x H200 figure: 1 GiB at 326 GB/s bus bandwidth is 3.29 ms per all-reduce.
    assert multigpu.bus_bandwidth(2**30, 0.0032937, 2)[1] == pytest.approx(326.0, abs=0.05)
    assert multigpu.bus_bandwidth(2**30, 0.0, 2) == (0.0, 0.0)


def test_scaling_efficiency_against_one_gpu() -> None:
    assert multigpu.scaling_efficiency(9149.0, 4606.0, 2) == pytest.approx(0.9932, abs=1e-4)
    assert multigpu.scaling_efficiency(9149.0, 0.0, 2) is None


def _ok(rank: int, seconds: tuple[float, ...], elapsed: float = 2.0) -> Any:
    allreduce = [{"bytes": size, "seconds": s} for size, s in zip(multigpu.ALLREDUCE_SIZES, seconds, strict=False)]
    ddp = {"elapsed_s": elapsed, "warmup_s": 20.0, "final_loss": 6.9, "peak_mem_gib": 21.5 + rank, "model": "tv"}
    return workers.WorkerOutcome(rank, "ok", {"allreduce": allreduce, "ddp": ddp}, "", "ddp", "")


def test_allreduce_rows_take_the_slowest_gpu() -> None:
    outcomes = [_ok(0, (80e-6, 480e-6, 3.2e-3)), _ok(1, (79e-6, 481e-6, 3.3e-3))]
    rows = multigpu.allreduce_rows(outcomes, multigpu.ALLREDUCE_SIZES, 2, ["H200", "H200"])
    assert [(r["size"], r["time_us"], r["busbw_gbps"], r["status"]) for r in rows] == [
        ("16 MiB", 80.0, 209.7, "ok"),
        ("128 MiB", 481.0, 279.0, "ok"),
        ("1 GiB", 3300.0, 325.4, "ok"),
    ]
    assert rows[0]["algbw_gbps"] == rows[0]["busbw_gbps"]  # 2 GPUs
    one = multigpu.allreduce_rows([], multigpu.ALLREDUCE_SIZES, 1, ["H200"])
    assert {(r["status"], r["error"]) for r in one} == {("skipped", "needs 2 or more GPUs; 1 visible")}


def test_a_failed_gpu_fails_the_rows_and_is_named() -> None:
    failed = workers.WorkerOutcome(1, "error", None, "DistBackendError: NCCL error", "all_reduce", "")
    stopped = workers.WorkerOutcome(0, "stopped", None, "stopped after another worker failed", "all_reduce", "")
    rows = multigpu.allreduce_rows([stopped, failed], multigpu.ALLREDUCE_SIZES, 2, ["H200", "H200"])
    assert rows[0]["error"] == (
        "GPU 1 (H200) failed in all_reduce: DistBackendError: NCCL error; then stopped: GPU 0 (in all_reduce)"
    )
    ddp = multigpu.ddp_row([stopped, failed], 256, 50, ["H200", "H200"])
    assert (ddp["status"], ddp["images_per_s"]) == ("error", None)
    oom = workers.WorkerOutcome(0, "error", None, "OutOfMemoryError: CUDA out of memory. Tried to allocate", "ddp", "")
    assert multigpu.ddp_row([oom], 256, 50, ["H200"])["status"] == "oom"


def test_ddp_throughput_counts_every_gpu_over_the_slowest() -> None:
    row = multigpu.ddp_row([_ok(0, (), elapsed=2.78), _ok(1, (), elapsed=2.80)], 256, 50, ["H200", "H200"])
    assert row == {
        "gpus": 2, "status": "ok", "images_per_s": 9142.9, "step_ms": 56.0, "peak_mem_gib": 22.5, "warmup_s": 20.0,
        "final_loss": 6.9, "error": None,
    }  # fmt: skip


def _multi(one: dict[str, Any], all_gpus: dict[str, Any] | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ddp = {"one_gpu": one, "all_gpus": all_gpus, "mode": "bf16_cl", "description": "AMP bf16 + channels_last",
           "batch_size_per_gpu": 256, "scaling_efficiency": 0.9932}  # fmt: skip
    return {"gpus": 2, "gpu_names": ["H200"] * 2, "nccl": "2.28.9", "collective_env": {"NCCL_NVLS_ENABLE": "0"},
            "allreduce": rows, "ddp": ddp}  # fmt: skip


def test_multi_gpu_outcome_and_table() -> None:
    rows = multigpu.allreduce_rows([_ok(0, (80e-6, 480e-6, 3.2e-3)), _ok(1, (80e-6, 480e-6, 3.2e-3))],
                                multigpu.ALLREDUCE_SIZES, 2, ["H200"] * 2)  # fmt: skip
    one = {"gpus": 1, "status": "ok", "images_per_s": 4606.0, "step_ms": 55.6, "error": None}
    two = {"gpus": 2, "status": "ok", "images_per_s": 9149.0, "step_ms": 56.0, "error": None}
    multi = _multi(one, two, rows)
    assert multigpu.decide_multi_gpu_outcome(multi) == ("passed", 0)
    assert multigpu.decide_multi_gpu_outcome(_multi(one, {**two, "status": "error", "error": "x"}, rows)) == (
        "failed",
        1,
    )
    env = {"gpu": "NVIDIA H200", "driver": "580", "torch": "2.11", "cuda": "13.0", "cudnn": "9.19.0", "model": "tv"}
    report = {"environment": env, "multi_gpu": multi, "warmup": 10, "iters": 50, "status": "passed", "exit_code": 0}
    table = multigpu.render_multi_gpu_table(report)
    assert "NCCL/torch.distributed environment: NCCL_NVLS_ENABLE=0" in table
    assert "   1 GiB     3200.0       335.5       335.5  ok" in table
    assert "  2 GPU(s)     9149.0 img/s     56.0 ms/step" in table
    assert table.endswith("scaling efficiency: 99.3 %\nRESULT passed (exit 0)")


@needs_torch
def test_gpus_all_without_a_gpu_skips_with_77_as_json(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    result = run_main(bench, ["--gpus", "all", "--json"], monkeypatch, capfd)
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"], report["multi_gpu"]) == (77, "skipped", None)
    assert report["benchmark"] == "multi-gpu-allreduce-ddp-resnet50" and "modes" not in report
