"""dl-bench without a GPU: flag parsing, the memory-saving arithmetic, the built-in ResNet-50,
and its behaviour as a script (skip with 77; what it shares with dl-smoke is in test_payload_commands.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from payload_scripts import BENCH, install_like_an_image, needs_torch, run_main, run_script

from dlimages.payload import dl_bench as bench
from dlimages.payload import dl_stack as stack


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
    assert bench.decide_outcome([_row("fp32", 1, 1.0), _row("compile", 1, None, "skipped")]) == ("passed", 0)
    assert bench.decide_outcome([_row("fp32", 1, None, "oom")]) == ("failed", 1)


def test_throughput_arithmetic() -> None:
    assert bench.images_per_second(128, 30, 3.84) == pytest.approx(1000.0)
    assert bench.images_per_second(128, 30, 0.0) == 0.0


@pytest.mark.parametrize(("value", "text"), [(8005, "8.0.5"), (8902, "8.9.2"), (90100, "9.1.0"), (91900, "9.19.0")])
def test_cudnn_version_text_handles_both_encodings(value: int, text: str) -> None:
    fake = SimpleNamespace(
        backends=SimpleNamespace(cudnn=SimpleNamespace(is_available=lambda: True, version=lambda: value))
    )
    assert bench.cudnn_version_text(fake) == text


def test_fp32_mode_turns_tf32_off_and_others_on() -> None:
    assert not bench.MODES["fp32"].tf32
    assert all(mode.tf32 for name, mode in bench.MODES.items() if name != "fp32")
    assert bench.MODES["compile"] == bench.Mode(
        "compile", "bfloat16", True, True, True, "AMP bf16 + channels_last + torch.compile"
    )


@pytest.mark.slow
@needs_torch
def test_builtin_resnet50_matches_torchvision_shape() -> None:
    import torch

    model = bench.builtin_resnet50(torch)
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
