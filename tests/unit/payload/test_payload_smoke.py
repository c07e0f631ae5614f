"""dl-smoke without a GPU: the payload's shared rules in dl_stack (arch compatibility, cuDNN decoding), dl-smoke's
own (versions, error classification: CUDA, cuDNN, XLA, per-GPU checks on fake frameworks, the multi-GPU verdicts from
each worker's outcome) and its behaviour as a script (skip with 77; a cuDNN that stops the import fails with 1;
what it shares with dl-bench is in test_payload_commands.py). The multi-process path itself runs here on the CPU
over gloo (test_payload_workers.py); over NCCL it runs in tests/gpu."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from payload_scripts import SMOKE, install_like_an_image, needs_torch, run_main, run_script

from dlimages.payload import dl_smoke as smoke
from dlimages.payload import dl_smoke_errors as errors
from dlimages.payload import dl_smoke_pytorch as smoke_torch
from dlimages.payload import dl_smoke_rules as rules
from dlimages.payload import dl_smoke_tensorflow as smoke_tf
from dlimages.payload import dl_smoke_training as training
from dlimages.payload import dl_stack as stack
from dlimages.payload import dl_workers as workers

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
    assert errors.describe_no_kernel((9, 0), TORCH_1_7_CU110) == (
        "no kernel image for sm_90 in this build (build has: sm_37 sm_50 sm_60 sm_70 sm_75 sm_80)"
    )


def test_build_arch_list_must_cover_the_cell() -> None:
    assert rules.arch_list_check(TORCH_2_11_CU130, ["sm_80", "sm_90"]).status == "pass"
    missing = rules.arch_list_check(TORCH_1_7_CU110, ["sm_80", "sm_90"])
    assert (missing.status, missing.detail.split(" (")[0]) == ("fail", "build lacks sm_90")
    assert rules.arch_list_check(TORCH_2_11_CU130, None).status == "skip"


def test_gpu_arch_check_names_the_kernel_a_gpu_runs_or_what_the_build_has() -> None:
    assert rules.gpu_arch_check(0, "NVIDIA H200", (9, 0), TORCH_2_11_CU130, "?") == rules.Check(
        "arch[0]", "pass", "NVIDIA H200 sm_90 runs sm_90"
    )
    assert rules.gpu_arch_check(1, "NVIDIA H100", (9, 0), TF_2_14, "?").detail == (
        "NVIDIA H100 sm_90 runs compute_80 (JIT from PTX)"
    )
    assert rules.gpu_arch_check(0, "NVIDIA H200", (9, 0), TORCH_1_7_CU110, "?") == rules.Check(
        "arch[0]", "fail", errors.describe_no_kernel((9, 0), TORCH_1_7_CU110)
    )
    assert rules.gpu_arch_check(2, "GPU", None, TF_2_14, "unknown") == rules.Check("arch[2]", "skip", "unknown")
    assert rules.gpu_arch_check(2, "GPU", (8, 0), None, "unknown") == rules.Check("arch[2]", "skip", "unknown")


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
    assert rules.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9", 2).status == "pass"
    assert rules.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.9.7.29", 2).status == "pass"
    mismatch = rules.compare_check("cudnn_version", "cuDNN", found, "8.9.2", "8.7", 2)
    assert mismatch == rules.Check("cudnn_version", "fail", "cuDNN version mismatch: found 8.9.2, expected 8.7")


def test_missing_expectation_is_not_checked() -> None:
    check = rules.compare_check("cuda_version", "CUDA", (13, 0), "13.0", None, 2)
    assert check == rules.Check("cuda_version", "skip", "not checked (no expectation); found 13.0")


def test_framework_version_matches_by_whole_components() -> None:
    found = stack.parse_version("2.11.0+cu130")
    assert found == (2, 11, 0)
    assert rules.version_matches(found, (2, 11))
    assert not rules.version_matches(found, (2, 1))  # 2.1 is not a prefix of 2.11


def test_driver_comparison_is_numeric() -> None:
    assert rules.driver_is_sufficient("580.159.04", "525.60.13") is True
    assert rules.driver_is_sufficient("470.82.01", "525.60.13") is False
    assert rules.driver_is_sufficient("unknown", "525.60.13") is None


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
    assert errors.classify_cuda_error(text) == kind


def test_driver_too_old_names_cuda_and_the_minimum() -> None:
    assert errors.describe_driver_too_old("12.1", "525.60.13", "470.82.01") == (
        "driver too old for CUDA 12.1 (needs >= 525.60.13); found driver 470.82.01"
    )
    # Without a cell, the minimum comes from CUDA's minor-version-compatibility table.
    assert errors.describe_driver_too_old("13.0", None, None) == "driver too old for CUDA 13.0 (needs >= 580.65.06)"


def test_unavailable_because_driver_too_old_fails_rather_than_skips() -> None:
    exp = rules.Expectations(None, None, "12.1", None, None, "525.60.13", None)
    check, visible = rules.unavailable_check(
        "cuda_available", "The NVIDIA driver on your system is too old", True, "12.1", exp, "470.82.01"
    )
    assert (check.status, visible) == ("fail", True)
    assert check.detail.startswith("driver too old for CUDA 12.1 (needs >= 525.60.13)")


# --- outcome and input -----------------------------------------------------------------------


def test_outcome_never_passes_without_a_gpu() -> None:
    info = [rules.Check("cuda_available", "skip", "no GPU visible")]
    failed = [*info, rules.Check("cuda_version", "fail", "mismatch")]
    assert rules.decide_outcome(info, False) == ("skipped", 77)
    assert rules.decide_outcome(failed, False) == ("failed", 1)
    assert rules.decide_outcome([rules.Check("x", "pass", "")], True) == ("passed", 0)


def test_loss_must_fall_and_stay_finite() -> None:
    assert rules.loss_decreased([2.0, 1.9, 1.8, 1.0, 0.9, 0.8])
    assert not rules.loss_decreased([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert not rules.loss_decreased([2.0, 1.9, 1.8, 1.0, 0.9, float("nan")])


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
            "compat_driver": "450.51.06", "forward_compat_branches": ["418"],
            "base_image": "ubuntu:20.04", "tags": ["v1.0-cuda11.0-torch1.7.1-py3.8-runtime"], "notes": []}  # fmt: skip
    loaded = smoke.validate_cell(cell, "cell.json")
    assert sorted(loaded) == sorted(smoke.CELL_KEYS)


def test_bad_cell_file_reports_every_problem() -> None:
    with pytest.raises(stack.UsageError) as error:
        smoke.validate_cell({"cuda_arch_list": ["sm_9"], "cuda": ["12.1"]}, "cell.json")
    assert str(error.value) == ("cell.json: cuda must be a string; cuda_arch_list has entries that are not archs: sm_9")


# --- the per-GPU checks, on frameworks that report GPUs without having one ----------------------------------------


def _torch_with_gpus(
    capabilities: list[tuple[int, int]], arch_list: list[str], error: str, cudnn_built: bool = True
) -> Any:
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
        device=lambda index: contextlib.nullcontext(),
        nccl=SimpleNamespace(version=lambda: (2, 28, 9)),
        can_device_access_peer=lambda a, b: True,
        empty_cache=lambda: None,
    )

    def version() -> None:
        raise AssertionError("dl-smoke must ask cuDNN nothing in its own process before the probe process")

    cudnn = SimpleNamespace(is_available=lambda: cudnn_built, version=version)
    distributed = SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: True)
    return SimpleNamespace(
        __version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"), cuda=cuda, distributed=distributed,
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


EXPECT_NOTHING = rules.Expectations(None, None, None, None, None, None, None)
OPTIONS = rules.RunOptions(steps=6, channels_last=False, multi_gpu=True)


def _outcome(
    rank: int, state: str = "ok", value: Any = None, error: str = "", stage: str = "", output: str = ""
) -> Any:
    return workers.WorkerOutcome(rank, state, value, error, stage or ("replicas" if state == "ok" else "init"), output)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Record the worker processes probe_torch would start, and answer for them: every worker ends well."""
    started: list[tuple[str, Any]] = []

    def cudnn_probe(index: int, dtype: str, channels_last: bool, convolve: bool) -> Any:
        started.append(("cudnn", index))
        return _outcome(0, value={"cudnn": 90100, "convolved": convolve})

    def multi_gpu(worker: Any, count: int, plan: dict[str, Any]) -> list[Any]:
        started.append((worker.__name__, plan))
        return [_outcome(rank, value={"losses": [2.0, 1.9, 1.8, 1.0, 0.9, 0.8], "drift": 0.0}) for rank in range(count)]

    monkeypatch.setattr(smoke_torch, "run_cudnn_probe", cudnn_probe)
    monkeypatch.setattr(smoke_torch, "run_multi_gpu", multi_gpu)
    return started


def test_torch_gpu_without_kernels_fails_its_arch_and_is_not_trained(probes: list[tuple[str, Any]]) -> None:
    fake = _torch_with_gpus([(9, 0), (8, 6)], ["sm_80"], NO_KERNEL_ERROR)
    probe = smoke_torch.probe_torch(fake, EXPECT_NOTHING, OPTIONS, None)
    checks = {c.name: c for c in probe.checks}
    assert checks["cudnn_version"].detail == "not checked (no expectation); found 9.1.0"
    assert checks["arch[0]"] == rules.Check("arch[0]", "fail", errors.describe_no_kernel((9, 0), ["sm_80"]))
    assert not any(name.endswith("[0]") and name.startswith("train") for name in checks)
    assert checks["arch[1]"] == rules.Check("arch[1]", "pass", "GPU1 sm_86 runs sm_80")
    # The loader's own error, in the words of the arch check.
    assert checks["train_amp_fp16[1]"].detail == errors.describe_no_kernel((8, 6), ["sm_80"])
    assert [g["capability"] for g in probe.gpus] == ["9.0", "8.6"]
    # cuDNN is tried on the first GPU the build can run; no multi-GPU run while a GPU fails its checks.
    assert probes == [("cudnn", 1)]
    assert checks["cudnn_load"] == rules.Check(
        "cudnn_load", "pass", "cuDNN 9.1.0 loaded; a convolution ran forward and backward on GPU 1 (GPU1)"
    )
    assert checks["multi_gpu"].status == "skip"


def test_tensorflow_gpus_share_the_arch_check_and_a_failed_fit_is_explained() -> None:
    tf = _TensorflowWithGpus([(9, 0), None], TF_2_14, "CUDA driver version is insufficient for CUDA runtime version")
    exp = EXPECT_NOTHING._replace(min_driver="520.61.05")
    checks = {c.name: c for c in smoke_tf.probe_tensorflow(tf, exp, OPTIONS, "470.82.01").checks}
    assert checks["arch[0]"].detail == "GPU0 sm_90 runs compute_80 (JIT from PTX)"
    assert checks["arch[1]"].status == "skip"
    assert checks["train_mixed_float16[0]"] == rules.Check(
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


# --- cuDNN and XLA, named from the libraries' own words ------------------------------------------------------------

# Messages as the loader, cuDNN, torch and TensorFlow print them (the library, then what the check says about it).
CUDNN_LOAD_FAILURES = [
    # torch 2.x: libtorch_cuda.so needs libcudnn.so.9, so `import torch` itself fails.
    (
        "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory",
        "libcudnn.so.9",
        "cuDNN could not be loaded: libcudnn.so.9: cannot open shared object file: No such file or directory",
    ),
    # torch's search of the nvidia-* wheels on sys.path, when the preload fails.
    (
        "ValueError: libcudnn.so.*[0-9] not found in the system path ['/usr/lib/python3.10', '/opt/venv/lib']",
        "libcudnn.so.*[0-9]",
        "cuDNN could not be loaded: libcudnn.so.*[0-9]: not found in the system path",
    ),
    # cuDNN 8 loads its sub-libraries at the first convolution, prints this, and aborts the process.
    (
        "Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_cnn_infer.so.8: cannot open shared object "
        "file: No such file or directory\nPlease make sure libcudnn_cnn_infer.so.8 is in your library path!",
        "libcudnn_cnn_infer.so.8",
        "cuDNN could not be loaded: libcudnn_cnn_infer.so.8: cannot open shared object file: No such file or directory",
    ),
    (
        "Could not load library libcudnn_cnn_infer.so.8. Error: libnvrtc.so: cannot open shared object file: "
        "No such file or directory",
        "libcudnn_cnn_infer.so.8",
        "cuDNN could not be loaded: libcudnn_cnn_infer.so.8: libnvrtc.so: cannot open shared object file: "
        "No such file or directory",
    ),
    # cuDNN 9's sub-library loader.
    (
        "Unable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, libcudnn_cnn.so.9, libcudnn_cnn.so}\n"
        "Invalid handle. Cannot load symbol cudnnCreateConvolutionDescriptor",
        "libcudnn_cnn.so.9.1.0",
        "cuDNN could not be loaded: Unable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, "
        "libcudnn_cnn.so.9, libcudnn_cnn.so}",
    ),
    # TensorFlow's dso_loader, which then registers no GPU at all.
    (
        "2023-05-03 10:12:01.123456: W tensorflow/compiler/xla/stream_executor/platform/default/dso_loader.cc:66] "
        "Could not load dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file: "
        "No such file or directory; LD_LIBRARY_PATH: /usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "libcudnn.so.8",
        "cuDNN could not be loaded: libcudnn.so.8: cannot open shared object file: No such file or directory; "
        "LD_LIBRARY_PATH: /usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    ),
    # Sub-libraries of two cuDNN releases mixed.
    (
        "/usr/lib/x86_64-linux-gnu/libcudnn_cnn_infer.so.8: undefined symbol: "
        "_ZN5cudnn3cnn5infer22queryClusterPropertiesERPhS3_, version libcudnn_ops_infer.so.8",
        "libcudnn_cnn_infer.so.8",
        "cuDNN could not be loaded: libcudnn_cnn_infer.so.8: undefined symbol: "
        "_ZN5cudnn3cnn5infer22queryClusterPropertiesERPhS3_",
    ),
]


@pytest.mark.parametrize(("text", "library", "detail"), CUDNN_LOAD_FAILURES, ids=lambda v: str(v)[:30])
def test_a_cudnn_library_that_does_not_load_is_named(text: str, library: str, detail: str) -> None:
    problem = errors.classify_cudnn_error(text)
    assert problem is not None
    assert (problem.kind, problem.library) == ("cudnn_load", library)
    assert errors.describe_cudnn_problem(problem) == detail


@pytest.mark.parametrize(
    ("text", "kind", "detail"),
    [
        (
            "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 1, 0) but found runtime "
            "version (8, 9, 2). PyTorch already comes bundled with cuDNN.",
            "cudnn_load",
            "cuDNN could not be loaded: RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against "
            "(9, 1, 0) but found runtime version (8, 9, 2). PyTorch already comes bundled with cuDNN.",
        ),
        (
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:361] Loaded runtime CuDNN library: 8.1.0 but source was "
            "compiled with: 8.6.0.  CuDNN library needs to have matching major version and equal or higher minor "
            "version.",
            "cudnn_load",
            None,
        ),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "cudnn_load", None),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED", "cudnn_load", None),
        ("UnimplementedError: DNN library is not found.", "cudnn_load", None),
        (
            "UnknownError: Failed to get convolution algorithm. This is probably because cuDNN failed to initialize, "
            "so try looking to see if a warning log message was printed above. [Op:Conv2D]",
            "cudnn_load",
            None,
        ),
        (
            "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
            "cudnn_failed",
            "cuDNN failed: RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        ),
        ("RuntimeError: GET was unable to find an engine to execute this computation", "cudnn_failed", None),
    ],
    ids=lambda v: str(v)[:30],
)
def test_cudnn_mismatch_init_and_call_failures(text: str, kind: str, detail: str | None) -> None:
    problem = errors.classify_cudnn_error(text)
    assert problem is not None and problem.kind == kind
    if detail is not None:
        assert errors.describe_cudnn_problem(problem) == detail


@pytest.mark.parametrize("text", [NO_KERNEL_ERROR, "CUDA out of memory. Tried to allocate 2.00 GiB", "libcublas"])
def test_other_errors_are_not_blamed_on_cudnn(text: str) -> None:
    assert errors.classify_cudnn_error(text) is None


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("InternalError: libdevice not found at ./libdevice.10.bc [Op:__inference__update_step_xla_512]", "libdevice"),
        ("W gpu_backend_lib.cc] Can't find libdevice directory ${CUDA_DIR}/nvvm/libdevice", "libdevice"),
        ("Couldn't get ptxas version string: INTERNAL: Couldn't invoke ptxas --version", "ptxas"),
        ("CUDA error: out of memory", None),
    ],
)
def test_xla_missing_libdevice_or_ptxas_is_named(text: str, missing: str | None) -> None:
    assert errors.classify_xla_error(text) == missing


def test_a_failed_step_names_cudnn_or_xla_before_the_raw_line() -> None:
    explain = functools.partial(
        rules.describe_cuda_failure, capability=(9, 0), arch_list=TORCH_2_11_CU130, cuda="11.8",
        exp=EXPECT_NOTHING, driver=None,
    )  # fmt: skip
    assert explain("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED").startswith("cuDNN could not be loaded")
    # TF: the exception is terse, the native log has the library.
    cudnn = explain("UnimplementedError: DNN library is not found.", log=CUDNN_LOAD_FAILURES[5][0])
    assert cudnn == CUDNN_LOAD_FAILURES[5][2]
    xla = explain("InternalError: libdevice not found at ./libdevice.10.bc [Op:__inference__update_step_xla_512]")
    assert xla.startswith("XLA could not compile for the GPU: libdevice not found (libdevice.10.bc, from CUDA's")
    assert xla.endswith(
        ": InternalError: libdevice not found at ./libdevice.10.bc [Op:__inference__update_step_xla_512]"
    )
    assert explain("RuntimeError: something else\nmore") == "RuntimeError: something else"


def _explain(text: str) -> str:
    return f"explained: {text.splitlines()[0]}"


def _load(outcome: Any) -> tuple[rules.Check, Any]:
    return smoke_torch.cudnn_load_check(outcome, "GPU 0 (NVIDIA H200)", _explain)


def test_cudnn_load_check_from_the_probe_process() -> None:
    assert _load(_outcome(0, value={"cudnn": 91900, "convolved": True})) == (
        rules.Check(
            "cudnn_load", "pass", "cuDNN 9.19.0 loaded; a convolution ran forward and backward on GPU 0 (NVIDIA H200)"
        ),
        (9, 19, 0),
    )
    assert _load(_outcome(0, value={"cudnn": 8902, "convolved": False})) == (
        rules.Check("cudnn_load", "skip", "cuDNN 8.9.2 loaded; no convolution run: no GPU has kernels"),
        (8, 9, 2),
    )
    # cuDNN 8 prints the library it missed and aborts: the parent names both, and keeps the version it had.
    aborted = _outcome(0, "died", {"cudnn": 8902}, "killed by SIGABRT", "convolution", output=CUDNN_LOAD_FAILURES[2][0])
    check, version = _load(aborted)
    assert (check.detail, version) == (
        CUDNN_LOAD_FAILURES[2][2] + " (the test process killed by SIGABRT, at convolution)",
        (8, 9, 2),
    )
    raised = _outcome(0, "error", error="RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", stage="convolution")
    assert (
        _load(raised)[0].detail == "cuDNN could not be loaded: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
    )
    # A mismatched library raises in the version query; a library that ends the process there is named by stage.
    mismatch = "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0) but found ..."
    assert _load(_outcome(0, "error", error=mismatch, stage="cudnn version")) == (
        rules.Check("cudnn_load", "fail", f"cuDNN could not be loaded: {mismatch}"),
        None,
    )
    silent = _outcome(0, "died", error="killed by SIGABRT", stage="cudnn version")
    assert _load(silent)[0].detail == (
        "cuDNN could not be loaded: killed by SIGABRT (the test process killed by SIGABRT, at cudnn version)"
    )
    other = _outcome(0, "error", error="RuntimeError: CUDA error: out of memory", stage="convolution")
    assert _load(other)[0] == rules.Check(
        "cudnn_load",
        "fail",
        "a convolution on GPU 0 (NVIDIA H200) failed: explained: RuntimeError: CUDA error: out of memory",
    )


def test_torch_without_a_loadable_cudnn_fails_cudnn_load_and_trains_nothing(
    monkeypatch: pytest.MonkeyPatch, probes: list[tuple[str, Any]]
) -> None:
    aborted = _outcome(0, "died", error="killed by SIGABRT", stage="convolution", output=CUDNN_LOAD_FAILURES[2][0])
    monkeypatch.setattr(smoke_torch, "run_cudnn_probe", lambda index, dtype, channels_last, convolve: aborted)
    probe = smoke_torch.probe_torch(
        _torch_with_gpus([(9, 0), (9, 0)], TORCH_2_11_CU130, "unused"), EXPECT_NOTHING, OPTIONS, None
    )
    checks = {c.name: c for c in probe.checks}
    assert checks["cudnn_load"].status == "fail"
    assert checks["cudnn_load"].detail.startswith("cuDNN could not be loaded: libcudnn_cnn_infer.so.8: cannot open")
    assert [checks["train[0]"].status, checks["train[1]"].status, checks["multi_gpu"].status] == ["skip"] * 3
    assert not any(name.startswith(("train_amp", "nccl", "ddp")) for name in checks)
    assert rules.decide_outcome(probe.checks, probe.gpu_visible) == ("failed", 1)
    # A torch built without cuDNN starts no probe process.
    fake = _torch_with_gpus([(9, 0)], TORCH_2_11_CU130, "unused", cudnn_built=False)
    probes.clear()
    checks = {c.name: c for c in smoke_torch.probe_torch(fake, EXPECT_NOTHING, OPTIONS, None).checks}
    assert (checks["cudnn_load"].detail, checks["cudnn_version"].detail, probes) == (
        "cuDNN could not be loaded: this torch has none (built without cuDNN)",
        "not checked (no expectation); found none",
        [],
    )


def test_a_cudnn_that_stops_the_import_is_a_failed_check_not_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    why = "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(smoke, "import_framework", lambda name: (None, why))
    monkeypatch.setattr(stack, "read_driver_version", lambda: "580.159.04")
    assert smoke.main(["--json", "--framework", "pytorch"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["status"], report["framework"], report["gpus"]) == ("failed", "pytorch", [])
    assert report["checks"][-1] == {
        "name": "cudnn_load",
        "status": "fail",
        "detail": "cuDNN could not be loaded: libcudnn.so.9: cannot open shared object file: No such file or "
        "directory (importing torch failed)",
    }
    # Any other import failure stays what it was: the framework asked for is not there (2).
    monkeypatch.setattr(smoke, "import_framework", lambda name: (None, "ModuleNotFoundError: No module named 'torch'"))
    assert smoke.main(["--framework", "pytorch"]) == 2
    assert "cannot import pytorch (ModuleNotFoundError: No module named 'torch')" in capsys.readouterr().err


# --- several GPUs: the verdicts from each worker's outcome ---------------------------------------------------------

H200 = ["NVIDIA H200", "NVIDIA H200"]
PLAN = {"dtype": "bfloat16", "steps": 6, "channels_last": False, "elements": 4 * 2**20}
LEARNING = {"losses": [2.0, 1.9, 1.8, 1.0, 0.9, 0.8], "drift": 0.0}


def _summary(outcomes: list[Any], peers: list[tuple[int, int]] | None = None) -> dict[str, rules.Check]:
    names = [f"NVIDIA H200 #{i}" for i in range(len(outcomes))]
    checks = smoke_torch.summarize_multi_gpu(outcomes, names, PLAN, [(0, 1)] if peers is None else peers, "2.28.9")
    return {c.name: c for c in checks}


def test_multi_gpu_passes_when_every_rank_sums_right_and_stays_in_sync() -> None:
    checks = _summary([_outcome(0, value=LEARNING), _outcome(1, value=LEARNING)])
    assert checks == {
        "nccl_allreduce": rules.Check(
            "nccl_allreduce",
            "pass",
            "2 GPUs summed 16 MiB float32 each correctly (NCCL 2.28.9; peer-to-peer access between every pair)",
        ),
        "ddp_train": rules.Check(
            "ddp_train",
            "pass",
            "2 GPUs, bfloat16 autocast, conv + batch norm: loss 2.0000 -> 0.8000 over 6 steps on GPU 0; "
            "replicas identical",
        ),
    }


def test_multi_gpu_names_the_gpu_that_failed_the_all_reduce() -> None:
    nccl = "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1971, unhandled cuda error (run with NCCL_DEBUG=INFO)"
    outcomes = [
        _outcome(0, "stopped", error="stopped after another worker failed", stage="all_reduce"),
        _outcome(
            1, "error", error=nccl, stage="all_reduce", output="host:1:1 [1] NCCL WARN Cuda failure 'peer access'"
        ),
    ]
    checks = _summary(outcomes, peers=[])
    assert checks["nccl_allreduce"] == rules.Check(
        "nccl_allreduce",
        "fail",
        f"GPU 1 (NVIDIA H200 #1) failed in all_reduce: {nccl}; host:1:1 [1] NCCL WARN Cuda failure 'peer access'; "
        "then stopped: GPU 0 (in all_reduce); suspect GPU 0, GPU 1 or the link between them "
        "(no peer-to-peer access between the GPUs: NCCL goes through host memory)",
    )
    assert checks["ddp_train"] == rules.Check("ddp_train", "skip", "not run: the all-reduce failed")


def test_multi_gpu_hang_names_where_each_gpu_waited() -> None:
    outcomes = [
        _outcome(r, "timeout", error="still running after 300 s", stage=s) for r, s in ((0, "all_reduce"), (1, "init"))
    ]
    assert _summary(outcomes)["nccl_allreduce"].detail.startswith(
        "still waiting when stopped (still running after 300 s): GPU 0 (NVIDIA H200 #0) in all_reduce, "
        "GPU 1 (NVIDIA H200 #1) in init; suspect GPU 0, GPU 1 or the link"
    )


def test_multi_gpu_ddp_failures_after_a_good_all_reduce() -> None:
    died = _outcome(1, "died", error="killed by SIGSEGV", stage="ddp", output="...\nSegmentation fault in cudnn")
    checks = _summary([_outcome(0, "stopped", error="stopped after another worker failed", stage="ddp"), died])
    assert checks["nccl_allreduce"].status == "pass"
    assert checks["ddp_train"].detail == (
        "GPU 1 (NVIDIA H200 #1) failed in ddp (the process died: killed by SIGSEGV): Segmentation fault in cudnn; "
        "then stopped: GPU 0 (in ddp)"
    )
    flat = {"losses": [1.0] * 6, "drift": 0.0}
    assert _summary([_outcome(0, value=LEARNING), _outcome(1, value=flat)])["ddp_train"].detail == (
        "loss did not decrease on GPU 1: loss 1.0000 -> 1.0000 over 6 steps"
    )
    drifted = {"losses": LEARNING["losses"], "drift": 0.25}
    assert _summary([_outcome(0, value=LEARNING), _outcome(1, value=drifted)])["ddp_train"].detail == (
        "replicas drifted apart: GPU 1's parameters differ from GPU 0's by 0.25"
    )


@pytest.mark.parametrize("count", range(2, 10))
def test_round_robin_pairs_every_gpu_with_every_other_once_in_disjoint_rounds(count: int) -> None:
    rounds = training.round_robin(count)
    pairs = [pair for pairs in rounds for pair in pairs]
    assert sorted(pairs) == [(a, b) for a in range(count) for b in range(a + 1, count)]
    for pairs in rounds:
        busy = [gpu for pair in pairs for gpu in pair]
        assert len(busy) == len(set(busy))  # a GPU is in at most one pair per round
    assert len(rounds) == count - 1 + count % 2


def test_link_checks_name_the_link_that_fails_or_hangs() -> None:
    names = ["A100 #0", "A100 #1", "A100 #2", "A100 #3"]
    broken = "DistBackendError: NCCL error: unhandled system error"
    outcomes = [
        _outcome(0, value={"0-1": "ok", "0-2": "ok", "0-3": "ok"}, stage="done"),
        _outcome(1, value={"0-1": "ok", "1-2": broken}, stage="done"),
        _outcome(2, "timeout", value={"0-2": "ok", "1-2": broken}, error="still running", stage="pair 2-3"),
        _outcome(3, "timeout", value={"0-3": "ok"}, error="still running", stage="pair 2-3"),
    ]
    checks = {c.name: (c.status, c.detail) for c in smoke_torch.link_checks(outcomes, names)}
    assert checks == {
        "nccl_link[0-1]": ("pass", "GPU 0 (A100 #0) <-> GPU 1 (A100 #1): all-reduce correct"),
        "nccl_link[0-2]": ("pass", "GPU 0 (A100 #0) <-> GPU 2 (A100 #2): all-reduce correct"),
        "nccl_link[0-3]": ("pass", "GPU 0 (A100 #0) <-> GPU 3 (A100 #3): all-reduce correct"),
        "nccl_link[1-2]": ("fail", f"GPU 1 (A100 #1) <-> GPU 2 (A100 #2): {broken}"),
        "nccl_link[1-3]": ("skip", "GPU 1 (A100 #1) <-> GPU 3 (A100 #3): not reached"),
        "nccl_link[2-3]": (
            "fail",
            "GPU 2 (A100 #2) <-> GPU 3 (A100 #3): the all-reduce did not complete (hung or the process died)",
        ),
    }


def test_several_gpus_run_the_multi_gpu_checks_in_one_process_per_gpu(probes: list[tuple[str, Any]]) -> None:
    fake = _torch_with_gpus([(9, 0), (9, 0)], TORCH_2_11_CU130, "unused")
    checks = {c.name: c for c in smoke_torch.probe_torch(fake, EXPECT_NOTHING, OPTIONS, None).checks}
    assert (checks["nccl_allreduce"].status, checks["ddp_train"].status) == ("pass", "pass")
    assert checks["nccl_allreduce"].detail.startswith("2 GPUs summed 16 MiB float32 each correctly (NCCL 2.28.9;")
    [(worker, plan)] = [p for p in probes if p[0] != "cudnn"]
    assert worker == "multi_gpu_worker"
    assert plan == {
        "backend": "nccl", "device": "cuda", "dtype": "bfloat16", "steps": 6, "channels_last": False,
        "elements": smoke_torch.ALLREDUCE_ELEMENTS, "timeout_s": smoke_torch.MULTI_GPU_TIMEOUT_S,
    }  # fmt: skip


def test_no_multi_gpu_flag_and_pre_ampere_gpus(probes: list[tuple[str, Any]]) -> None:
    fake = _torch_with_gpus([(9, 0), (9, 0)], TORCH_2_11_CU130, "unused")
    checks = {
        c.name: c for c in smoke_torch.probe_torch(fake, EXPECT_NOTHING, OPTIONS._replace(multi_gpu=False), None).checks
    }
    assert checks["multi_gpu"] == rules.Check("multi_gpu", "skip", "2 GPUs visible; not run (--no-multi-gpu)")
    assert [p for p in probes if p[0] != "cudnn"] == []
    # V100s have no bf16: the DDP step runs fp16 with a GradScaler there.
    smoke_torch.probe_torch(_torch_with_gpus([(7, 0)] * 3, ["sm_70"], "unused"), EXPECT_NOTHING, OPTIONS, None)
    assert [p[1]["dtype"] for p in probes if p[0] == "multi_gpu_worker"] == ["float16"]


def test_a_link_diagnosis_follows_a_failed_all_reduce_on_more_than_two_gpus(
    monkeypatch: pytest.MonkeyPatch, probes: list[tuple[str, Any]]
) -> None:
    def workers(worker: Any, count: int, plan: dict[str, Any]) -> list[Any]:
        probes.append((worker.__name__, count))
        if worker.__name__ == "multi_gpu_worker":
            return [_outcome(r, "timeout", error="still running after 300 s", stage="all_reduce") for r in range(count)]
        return [_outcome(r, value={f"{a}-{b}": "ok" for a in range(3) for b in range(a + 1, 3)}) for r in range(count)]

    monkeypatch.setattr(smoke_torch, "run_multi_gpu", workers)
    checks = smoke_torch.probe_torch(
        _torch_with_gpus([(9, 0)] * 3, TORCH_2_11_CU130, "unused"), EXPECT_NOTHING, OPTIONS, None
    )
    assert [p for p in probes if p[0] != "cudnn"] == [("multi_gpu_worker", 3), ("pair_worker", 3)]
    assert [c.name for c in checks.checks if c.name.startswith("nccl_link")] == [
        "nccl_link[0-1]", "nccl_link[0-2]", "nccl_link[1-2]"
    ]  # fmt: skip


# --- TensorFlow: cuDNN, XLA and several GPUs -------------------------------------------------------------------------


def test_tensorflow_that_could_not_dlopen_cudnn_fails_cudnn_load(monkeypatch: pytest.MonkeyPatch) -> None:
    tf = _TensorflowWithGpus([], TF_2_14, "unused")

    def list_gpus(kind: str) -> list[Any]:
        os.write(2, (CUDNN_LOAD_FAILURES[5][0] + "\nSkipping registering GPU devices...\n").encode())
        return []

    tf.config.list_physical_devices = list_gpus
    checks = {c.name: c for c in smoke_tf.probe_tensorflow(tf, EXPECT_NOTHING, OPTIONS, None).checks}
    assert checks["cudnn_load"] == rules.Check("cudnn_load", "fail", CUDNN_LOAD_FAILURES[5][2])
    assert "cuda_available" not in checks


def test_tensorflow_names_missing_libdevice_and_leaves_several_gpus_to_pytorch() -> None:
    tf = _TensorflowWithGpus([(9, 0), (9, 0)], TF_2_14, "libdevice not found at ./libdevice.10.bc [Op:__inference]")
    checks = {c.name: c for c in smoke_tf.probe_tensorflow(tf, EXPECT_NOTHING, OPTIONS, None).checks}
    assert checks["train_mixed_float16[0]"].detail.startswith("XLA could not compile for the GPU: libdevice not found")
    assert "cudnn_load" not in checks  # not a cuDNN problem: no cuDNN check claims it
    assert checks["multi_gpu"] == rules.Check(
        "multi_gpu",
        "skip",
        "2 GPUs visible; not checked for TensorFlow: dl-smoke's NCCL all-reduce and DDP checks are PyTorch only "
        "(TensorFlow's MirroredStrategy is not exercised)",
    )
    failed = _TensorflowWithGpus([(9, 0)], TF_2_14, "UnimplementedError: DNN library is not found.")
    checks = {c.name: c for c in smoke_tf.probe_tensorflow(failed, EXPECT_NOTHING, OPTIONS, None).checks}
    assert checks["cudnn_load"] == rules.Check(
        "cudnn_load", "fail", "cuDNN could not be loaded: UnimplementedError: DNN library is not found."
    )
    assert "multi_gpu" not in checks


def _maps(path: str) -> str:
    """Lines of /proc/self/maps as Linux writes them, one of them mapping `path`."""
    return (
        "7f0a1c000000-7f0a1c021000 rw-p 00000000 00:00 0 \n"
        f"7f0a2b3c4000-7f0a2b3e5000 r-xp 00000000 08:01 1234567                    {path}\n"
        "7f0a2c000000-7f0a2c200000 r-xp 00000000 08:01 7654321                    /usr/lib/libc.so.6\n"
    )


def test_cudnn_sub_libraries_missing_beside_the_mapped_libcudnn(tmp_path: Path) -> None:
    # cuDNN 9 ends the process without a word when a sub-library is missing: dl-smoke looks for them itself.
    wheel = tmp_path / "nvidia" / "cudnn" / "lib"
    wheel.mkdir(parents=True)
    for part in ("adv", "cnn", "engines_precompiled", "engines_runtime_compiled", "heuristic"):
        (wheel / f"libcudnn_{part}.so.9").touch()
    assert errors.missing_cudnn_sublibraries(_maps(f"{wheel}/libcudnn.so.9")) == (
        f"libcudnn_graph.so.9, libcudnn_ops.so.9 missing beside {wheel}/libcudnn.so.9"
    )
    (wheel / "libcudnn_graph.so.9").touch()
    (wheel / "libcudnn_ops.so.9").touch()
    assert errors.missing_cudnn_sublibraries(_maps(f"{wheel}/libcudnn.so.9")) is None
    # A system install maps the versioned file; cuDNN 8 has other sub-libraries.
    assert errors.missing_cudnn_sublibraries(_maps("/nowhere/libcudnn.so.8.9.2")) == (
        "libcudnn_adv_infer.so.8, libcudnn_adv_train.so.8, libcudnn_cnn_infer.so.8, libcudnn_cnn_train.so.8, "
        "libcudnn_ops_infer.so.8, libcudnn_ops_train.so.8 missing beside /nowhere/libcudnn.so.8.9.2"
    )
    assert errors.missing_cudnn_sublibraries(_maps("/usr/lib/libcudnn_graph.so.9")) is None  # not libcudnn.so.N


def test_a_silent_cudnn_abort_is_named_by_its_missing_sub_libraries() -> None:
    # As seen on an H200 with cuDNN 9.19's sub-libraries renamed: the probe process died in the version query.
    silent = _outcome(0, "died", error="killed by SIGABRT", stage="cudnn version")
    missing = "libcudnn_graph.so.9, libcudnn_ops.so.9 missing beside /opt/venv/nvidia/cudnn/lib/libcudnn.so.9"
    check, _ = smoke_torch.cudnn_load_check(silent, "GPU 0 (NVIDIA H200)", _explain, missing)
    assert check.detail == (
        f"cuDNN could not be loaded: {missing} (the test process killed by SIGABRT, at cudnn version)"
    )
    said = silent._replace(output="cudnn: something went wrong\n")
    assert smoke_torch.cudnn_load_check(said, "GPU 0 (NVIDIA H200)", _explain)[0].detail == (
        "cuDNN could not be loaded: killed by SIGABRT; its last output: cudnn: something went wrong "
        "(the test process killed by SIGABRT, at cudnn version)"
    )


@pytest.mark.parametrize(
    ("driver", "status", "words"),
    [
        ("535.104.05", "pass", "(needs >= 530.30.02)"),
        ("525.60.13", "pass", "minor-version compatibility (from 525.60.13"),
        ("470.82.01", "pass", "forward compatibility (the image's cuda-compat on driver branch 470"),
        ("450.80.02", "fail", "driver too old for CUDA 12.1 (needs >= 525.60.13); found driver 450.80.02"),
    ],
)
def test_the_driver_check_follows_the_images_rule(driver: str, status: str, words: str) -> None:
    exp = rules.Expectations(None, None, "12.1", None, None, "530.30.02", None, "525.60.13", ("470",))
    check = rules.driver_check(exp, driver)
    assert check.status == status and words in check.detail, check.detail
