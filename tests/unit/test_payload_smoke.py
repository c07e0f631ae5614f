"""dl-smoke without a GPU: the payload's shared rules in dl_stack (arch compatibility, cuDNN decoding), dl-smoke's
own (versions, error classification, per-GPU checks on fake frameworks) and its behaviour as a script (skip with 77;
what it shares with dl-bench is in test_payload_commands.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from payload_scripts import SMOKE, install_like_an_image, needs_torch, run_main, run_script

from dlimages.payload import dl_smoke as smoke
from dlimages.payload import dl_stack as stack

TORCH_2_11_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
TORCH_1_7_CU110 = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80"]
TF_2_14 = ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"]
NO_KERNEL_ERROR = "CUDA error: no kernel image is available for execution on the device"


# --- the arch rule (dl_stack) ------------------------------------------------------------------


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
    parsed = stack.parse_arch(entry)
    assert parsed is not None
    assert stack.entry_runs_on(parsed, capability) is runs


def test_parse_arch_reads_multi_digit_majors_and_rejects_junk() -> None:
    assert stack.parse_arch("sm_100a") == stack.ArchEntry("sm", 10, 0, "a", "sm_100a")
    assert stack.parse_arch("compute_75") == stack.ArchEntry("compute", 7, 5, "", "compute_75")
    assert stack.parse_arch("sm_9") is None
    assert stack.parse_arch("8.0") is None


def test_kernel_for_h200_in_torch_2_11() -> None:
    assert stack.kernel_for_capability((9, 0), TORCH_2_11_CU130) == "sm_90"


def test_kernel_prefers_the_newest_matching_cubin_over_ptx() -> None:
    assert stack.kernel_for_capability((8, 9), ["sm_80", "sm_86", "compute_86"]) == "sm_86"
    assert stack.kernel_for_capability((9, 0), ["sm_80", "compute_80"]) == "compute_80"


def test_no_kernel_for_hopper_in_torch_1_7() -> None:
    assert stack.kernel_for_capability((9, 0), TORCH_1_7_CU110) is None
    assert smoke.describe_no_kernel((9, 0), TORCH_1_7_CU110) == (
        "no kernel image for sm_90 in this build (build has: sm_37 sm_50 sm_60 sm_70 sm_75 sm_80)"
    )


def test_build_arch_list_must_cover_the_cell() -> None:
    assert smoke.arch_list_check(TORCH_2_11_CU130, ["sm_80", "sm_90"]).status == "pass"
    missing = smoke.arch_list_check(TORCH_1_7_CU110, ["sm_80", "sm_90"])
    assert (missing.status, missing.detail.split(" (")[0]) == ("fail", "build lacks sm_90")
    assert smoke.arch_list_check(TORCH_2_11_CU130, None).status == "skip"


def test_gpu_arch_check_names_the_kernel_a_gpu_runs_or_what_the_build_has() -> None:
    assert smoke.gpu_arch_check(0, "NVIDIA H200", (9, 0), TORCH_2_11_CU130, "?") == smoke.Check(
        "arch[0]", "pass", "NVIDIA H200 sm_90 runs sm_90"
    )
    assert smoke.gpu_arch_check(1, "NVIDIA H100", (9, 0), TF_2_14, "?").detail == (
        "NVIDIA H100 sm_90 runs compute_80 (JIT from PTX)"
    )
    assert smoke.gpu_arch_check(0, "NVIDIA H200", (9, 0), TORCH_1_7_CU110, "?") == smoke.Check(
        "arch[0]", "fail", smoke.describe_no_kernel((9, 0), TORCH_1_7_CU110)
    )
    assert smoke.gpu_arch_check(2, "GPU", None, TF_2_14, "unknown") == smoke.Check("arch[2]", "skip", "unknown")
    assert smoke.gpu_arch_check(2, "GPU", (8, 0), None, "unknown") == smoke.Check("arch[2]", "skip", "unknown")


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
    assert stack.decode_cudnn_version(value) == decoded


@pytest.mark.parametrize(
    ("value", "parts"), [("8", (8,)), ("8.9", (8, 9)), ("8902", (8, 9, 2)), ("", None), (None, None)]
)
def test_cudnn_version_unpadded_keeps_only_the_parts_tf_gives(value: str | None, parts: tuple[int, ...] | None) -> None:
    assert stack.decode_cudnn_version(value, pad=False) == parts


def test_cudnn_is_compared_by_major_minor() -> None:
    found = stack.decode_cudnn_version(8902)
    assert smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9", 2).status == "pass"
    assert smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9.7.29", 2).status == "pass"
    mismatch = smoke.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.7", 2)
    assert mismatch == smoke.Check("cudnn_version", "fail", "cuDNN version mismatch: found 8.9.2, expected 8.7")


def test_missing_expectation_is_not_checked() -> None:
    check = smoke.compare_check("cuda_version", "CUDA", (13, 0), "13.0", None, 2)
    assert check == smoke.Check("cuda_version", "skip", "not checked (no expectation); found 13.0")


def test_framework_version_matches_by_whole_components() -> None:
    found = stack.parse_version("2.11.0+cu130")
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


def test_a_framework_answers_to_its_name_and_its_flag() -> None:
    for facts in stack.FRAMEWORKS.values():
        assert smoke.normalize_framework(facts.name.upper()) == smoke.normalize_framework(facts.flag) == facts.name
    with pytest.raises(stack.UsageError, match=r"unknown framework 'caffe' \(use pytorch or tensorflow\)"):
        smoke.normalize_framework("caffe")
    assert set(smoke.PROBES) == set(stack.FRAMEWORKS)


def test_rendered_cell_file_is_accepted() -> None:
    # cell.json as the renderer writes it: more keys than dl-smoke reads.
    cell = {"framework": "pytorch", "framework_version": "1.7.1", "cuda": "11.0", "cudnn": "8.0.5",
            "python": "3.8", "min_driver": "450.51.06", "cuda_arch_list": ["sm_37", "sm_80"],
            "base_image": "ubuntu:20.04", "tags": ["v1.0-cuda11.0-torch1.7.1-py3.8-runtime"], "notes": []}  # fmt: skip
    loaded = smoke.validate_cell(cell, "cell.json")
    assert sorted(loaded) == sorted(smoke.CELL_KEYS)


def test_bad_cell_file_reports_every_problem() -> None:
    with pytest.raises(stack.UsageError) as error:
        smoke.validate_cell({"cuda_arch_list": ["sm_9"], "cuda": ["12.1"]}, "cell.json")
    assert str(error.value) == ("cell.json: cuda must be a string; cuda_arch_list has entries that are not archs: sm_9")


# --- the per-GPU checks, on frameworks that report GPUs without having one ----------------------------------------


def _torch_with_gpus(capabilities: list[tuple[int, int]], arch_list: list[str], error: str) -> Any:
    """A torch that sees `capabilities` and whose every training step fails with `error`."""

    def device(*_: object) -> None:
        raise RuntimeError(error)

    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: len(capabilities),
        get_arch_list=lambda: arch_list,
        get_device_capability=lambda index: capabilities[index],
        get_device_properties=lambda index: SimpleNamespace(total_memory=141 * 2**30),
        get_device_name=lambda index: f"GPU{index}",
        is_bf16_supported=lambda: True,
    )
    cudnn = SimpleNamespace(is_available=lambda: True, version=lambda: 90100)
    return SimpleNamespace(
        __version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"), cuda=cuda,
        backends=SimpleNamespace(cudnn=cudnn), device=device, autocast=None,
    )  # fmt: skip


class _TensorflowWithGpus:
    """A TensorFlow whose build info and GPUs are given, and whose Keras fails with `error`."""

    def __init__(self, capabilities: list[tuple[int, int] | None], arch_list: list[str], error: str) -> None:
        self.__version__ = "2.14.1"
        self.error = error
        info = {"cuda_version": "11.8", "cudnn_version": "8", "cuda_compute_capabilities": arch_list}
        self.sysconfig = SimpleNamespace(get_build_info=lambda: info)
        gpus = [SimpleNamespace(name=f"GPU{i}", capability=c) for i, c in enumerate(capabilities)]

        def details(gpu: Any) -> dict[str, Any]:
            return {"device_name": gpu.name} | ({"compute_capability": gpu.capability} if gpu.capability else {})

        self.config = SimpleNamespace(
            list_physical_devices=lambda kind: gpus, experimental=SimpleNamespace(get_device_details=details)
        )

    @property
    def keras(self) -> Any:
        raise RuntimeError(self.error)


EXPECT_NOTHING = smoke.Expectations(None, None, None, None, None, None, None)


def test_torch_gpu_without_kernels_fails_its_arch_and_is_not_trained() -> None:
    probe = smoke.probe_torch(_torch_with_gpus([(9, 0), (8, 6)], ["sm_80"], NO_KERNEL_ERROR), EXPECT_NOTHING, 6, None)
    checks = {c.name: c for c in probe.checks}
    assert checks["cudnn_version"].detail == "not checked (no expectation); found 9.1.0"
    assert checks["arch[0]"] == smoke.Check("arch[0]", "fail", smoke.describe_no_kernel((9, 0), ["sm_80"]))
    assert not any(name.endswith("[0]") and name.startswith("train") for name in checks)
    assert checks["arch[1]"] == smoke.Check("arch[1]", "pass", "GPU1 sm_86 runs sm_80")
    # The loader's own error, in the words of the arch check.
    assert checks["train_amp_fp16[1]"].detail == smoke.describe_no_kernel((8, 6), ["sm_80"])
    assert [g["capability"] for g in probe.gpus] == ["9.0", "8.6"]


def test_tensorflow_gpus_share_the_arch_check_and_a_failed_fit_is_explained() -> None:
    tf = _TensorflowWithGpus([(9, 0), None], TF_2_14, "CUDA driver version is insufficient for CUDA runtime version")
    exp = EXPECT_NOTHING._replace(min_driver="520.61.05")
    checks = {c.name: c for c in smoke.probe_tensorflow(tf, exp, 6, "470.82.01").checks}
    assert checks["arch[0]"].detail == "GPU0 sm_90 runs compute_80 (JIT from PTX)"
    assert checks["arch[1]"].status == "skip"
    assert checks["train_mixed_float16[0]"] == smoke.Check(
        "train_mixed_float16[0]", "fail", "driver too old for CUDA 11.8 (needs >= 520.61.05); found driver 470.82.01"
    )
    assert checks["cudnn_version"].detail == "not checked (no expectation); found 8"


# --- as a script ------------------------------------------------------------------------------


@needs_torch
def test_no_gpu_skips_with_77(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    result = run_main(smoke, [], monkeypatch, capfd)
    assert result.returncode == 77, result.stderr
    assert "SKIP  cuda_available" in result.stdout
    assert result.stdout.rstrip().endswith("RESULT skipped (exit 77)")


@pytest.mark.slow
@needs_torch
def test_no_gpu_skips_with_77_as_json_as_images_install_it(tmp_path: Path) -> None:
    result = run_script(install_like_an_image(SMOKE, "dl-smoke", tmp_path), "--json")
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"], report["exit_code"]) == (77, "skipped", 77)
    assert report["framework"] == "pytorch" and report["gpus"] == []
    assert {c["name"]: c["status"] for c in report["checks"]}["cuda_available"] == "skip"


@needs_torch
def test_version_mismatch_fails_even_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    cell = tmp_path / "cell.json"
    cell.write_text(json.dumps({"framework": "pytorch", "framework_version": "0.1"}))
    report = json.loads(run_main(smoke, ["--json", "--cell-file", str(cell)], monkeypatch, capfd).stdout)
    assert (report["status"], report["exit_code"]) == ("failed", 1)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed here")
def test_requested_framework_that_does_not_import_exits_2() -> None:
    result = run_script(SMOKE, "--framework", "tensorflow")
    assert result.returncode == 2
    assert "cannot import tensorflow" in result.stderr
