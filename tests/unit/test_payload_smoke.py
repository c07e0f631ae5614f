"""dl-smoke without a GPU: its pure rules (arch compatibility, cuDNN decoding, version and error
classification) and its behaviour as a script (skip with 77, usage errors with 2)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "src" / "dlimages" / "payload" / "dl_smoke.py"

TORCH_2_11_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
TORCH_1_7_CU110 = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80"]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dl_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


smoke = _load()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # An empty CUDA_VISIBLE_DEVICES hides any GPU, so the skip path is tested on every host.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


# --- the arch rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "capability", "runs"),
    [
        ("sm_80", (8, 6), True),  # same major, newer minor: a cubin runs
        ("sm_86", (8, 0), False),  # older minor than the cubin: it does not
        ("sm_80", (9, 0), False),  # cubins never cross a major
        ("sm_90", (9, 0), True),
        ("sm_37", (3, 5), False),
        ("sm_120", (12, 1), True),
        ("compute_80", (9, 0), True),  # PTX JIT-compiles for any newer GPU
        ("compute_90", (8, 6), False),  # but not for an older one
        ("sm_90a", (9, 0), True),  # arch-specific: exactly that GPU
        ("sm_100a", (10, 3), False),
        ("sm_100f", (10, 3), True),  # family-specific: same major, newer minor
        ("sm_100f", (12, 0), False),
    ],
)
def test_entry_runs_on(entry: str, capability: tuple[int, int], runs: bool) -> None:
    parsed = smoke.parse_arch(entry)
    assert parsed is not None
    assert smoke.entry_runs_on(parsed, capability) is runs


def test_parse_arch_reads_multi_digit_majors_and_rejects_junk() -> None:
    assert smoke.parse_arch("sm_100a") == smoke.ArchEntry("sm", 10, 0, "a", "sm_100a")
    assert smoke.parse_arch("compute_75") == smoke.ArchEntry("compute", 7, 5, "", "compute_75")
    assert smoke.parse_arch("sm_9") is None
    assert smoke.parse_arch("8.0") is None


def test_kernel_for_h200_in_torch_2_11() -> None:
    assert smoke.kernel_for_capability((9, 0), TORCH_2_11_CU130) == "sm_90"


def test_kernel_prefers_the_newest_matching_cubin_over_ptx() -> None:
    assert smoke.kernel_for_capability((8, 9), ["sm_80", "sm_86", "compute_86"]) == "sm_86"
    assert smoke.kernel_for_capability((9, 0), ["sm_80", "compute_80"]) == "compute_80"


def test_no_kernel_for_hopper_in_torch_1_7() -> None:
    assert smoke.kernel_for_capability((9, 0), TORCH_1_7_CU110) is None
    assert smoke.describe_no_kernel((9, 0), TORCH_1_7_CU110) == (
        "no kernel image for sm_90 in this build (build has: sm_37 sm_50 sm_60 sm_70 sm_75 sm_80)"
    )


def test_build_arch_list_must_cover_the_cell() -> None:
    assert smoke.arch_list_check(TORCH_2_11_CU130, ["sm_80", "sm_90"]).status == "pass"
    missing = smoke.arch_list_check(TORCH_1_7_CU110, ["sm_80", "sm_90"])
    assert (missing.status, missing.detail.split(" (")[0]) == ("fail", "build lacks sm_90")
    assert smoke.arch_list_check(TORCH_2_11_CU130, None).status == "skip"


# --- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "decoded"),
    [
        (7605, (7, 6, 5)),
        (8005, (8, 0, 5)),
        (8700, (8, 7, 0)),
        (8902, (8, 9, 2)),
        (90100, (9, 1, 0)),
        (91002, (9, 10, 2)),
        (91900, (9, 19, 0)),
        ("8.9.2", (8, 9, 2)),
        ("90100", (9, 1, 0)),
        ("8", (8, 0, 0)),
        (None, None),
    ],
)
def test_decode_cudnn_version(value: Any, decoded: tuple[int, int, int] | None) -> None:
    assert smoke.decode_cudnn_version(value) == decoded


def test_cudnn_is_compared_by_major_minor() -> None:
    found = smoke.decode_cudnn_version(8902)
    assert smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9", 2).status == "pass"
    assert smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9.7.29", 2).status == "pass"
    mismatch = smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.7", 2)
    assert mismatch == smoke.Check("cudnn_version", "fail", "cuDNN version mismatch: found 8.9.2, expected 8.7")


def test_missing_expectation_is_not_checked() -> None:
    check = smoke.compare_check("cuda_version", "CUDA", (13, 0), "13.0", None, 2)
    assert check == smoke.Check("cuda_version", "skip", "not checked (no expectation); found 13.0")


def test_framework_version_matches_by_whole_components() -> None:
    found = smoke.parse_version("2.11.0+cu130")
    assert found == (2, 11, 0)
    assert smoke.version_matches(found, (2, 11))
    assert not smoke.version_matches(found, (2, 1))  # 2.1 is not a prefix of 2.11


def test_driver_comparison_is_numeric() -> None:
    assert smoke.driver_is_sufficient("580.159.04", "525.60.13") is True
    assert smoke.driver_is_sufficient("470.82.01", "525.60.13") is False
    assert smoke.driver_is_sufficient("unknown", "525.60.13") is None


# --- failure classification ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("CUDA error: no kernel image is available for execution on the device", "no_kernel_image"),
        (
            "The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver",
            "driver_too_old",
        ),
        ("CUDA driver version is insufficient for CUDA runtime version", "driver_too_old"),
        ("cudaErrorInsufficientDriver", "driver_too_old"),
        ("the provided PTX was compiled with an unsupported toolchain.", "driver_too_old"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", None),
    ],
)
def test_classify_cuda_error(text: str, kind: str | None) -> None:
    assert smoke.classify_cuda_error(text) == kind


def test_driver_too_old_names_cuda_and_the_minimum() -> None:
    assert smoke.describe_driver_too_old("12.1", "525.60.13", "470.82.01") == (
        "driver too old for CUDA 12.1 (needs >= 525.60.13); found driver 470.82.01"
    )
    # Without a cell, the minimum comes from CUDA's minor-version-compatibility table.
    assert smoke.describe_driver_too_old("13.0", None, None) == "driver too old for CUDA 13.0 (needs >= 580.65.06)"


def test_unavailable_because_driver_too_old_fails_rather_than_skips() -> None:
    exp = smoke.Expectations(None, None, "12.1", None, None, "525.60.13", None)
    check, visible = smoke.unavailable_check(
        "cuda_available", "The NVIDIA driver on your system is too old", True, "12.1", exp, "470.82.01"
    )
    assert (check.status, visible) == ("fail", True)
    assert check.detail.startswith("driver too old for CUDA 12.1 (needs >= 525.60.13)")


# --- outcome and input -----------------------------------------------------------------------


def test_outcome_never_passes_without_a_gpu() -> None:
    info = [smoke.Check("cuda_available", "skip", "no GPU visible")]
    failed = [*info, smoke.Check("cuda_version", "fail", "mismatch")]
    assert smoke.decide_outcome(info, False) == ("skipped", 77)
    assert smoke.decide_outcome(failed, False) == ("failed", 1)
    assert smoke.decide_outcome([smoke.Check("x", "pass", "")], True) == ("passed", 0)


def test_loss_must_fall_and_stay_finite() -> None:
    assert smoke.loss_decreased([2.0, 1.9, 1.8, 1.0, 0.9, 0.8])
    assert not smoke.loss_decreased([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert not smoke.loss_decreased([2.0, 1.9, 1.8, 1.0, 0.9, float("nan")])


def test_rendered_cell_file_is_accepted() -> None:
    # cell.json as the renderer writes it: more keys than dl-smoke reads.
    cell = {"framework": "pytorch", "framework_version": "1.7.1", "cuda": "11.0", "cudnn": "8.0.5",
            "python": "3.8", "min_driver": "450.51.06", "cuda_arch_list": ["sm_37", "sm_80"],
            "base_image": "ubuntu:20.04", "tags": ["v1.0-cuda11.0-torch1.7.1-py3.8-runtime"], "notes": []}  # fmt: skip
    loaded = smoke.validate_cell(cell, "cell.json")
    assert sorted(loaded) == sorted(smoke.CELL_KEYS)


def test_bad_cell_file_reports_every_problem() -> None:
    with pytest.raises(smoke.UsageError) as error:
        smoke.validate_cell({"cuda_arch_list": ["sm_9"], "cuda": ["12.1"]}, "cell.json")
    assert str(error.value) == ("cell.json: cuda must be a string; cuda_arch_list has entries that are not archs: sm_9")


def test_script_is_standalone_and_python_3_8_syntax() -> None:
    tree = ast.parse(SCRIPT.read_text(), feature_version=(3, 8))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.startswith("dlimages") for name in imported)


# --- as a script ------------------------------------------------------------------------------

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the skip path runs through torch (pip install torch)"
)


@needs_torch
def test_no_gpu_skips_with_77() -> None:
    result = _run()
    assert result.returncode == 77, result.stderr
    assert "SKIP  cuda_available" in result.stdout
    assert result.stdout.rstrip().endswith("RESULT skipped (exit 77)")


@needs_torch
def test_no_gpu_skips_with_77_as_json() -> None:
    result = _run("--json")
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"], report["exit_code"]) == (77, "skipped", 77)
    assert report["framework"] == "pytorch" and report["gpus"] == []
    assert {c["name"]: c["status"] for c in report["checks"]}["cuda_available"] == "skip"


@needs_torch
def test_version_mismatch_fails_even_without_a_gpu(tmp_path: Path) -> None:
    cell = tmp_path / "cell.json"
    cell.write_text(json.dumps({"framework": "pytorch", "framework_version": "0.1"}))
    report = json.loads(_run("--json", "--cell-file", str(cell)).stdout)
    assert (report["status"], report["exit_code"]) == ("failed", 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--framework", "caffe"], "invalid choice"),
        (["--steps", "3"], "--steps must be at least 6"),
        (["--cell-file", "/nonexistent/cell.json"], "cannot read cell file /nonexistent/cell.json"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = _run(*args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed here")
def test_requested_framework_that_does_not_import_exits_2() -> None:
    result = _run("--framework", "tensorflow")
    assert result.returncode == 2
    assert "cannot import tensorflow" in result.stderr
