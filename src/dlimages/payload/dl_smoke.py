#!/usr/bin/env python3
"""GPU smoke test run inside a dlimages image (installed as `dl-smoke`): prove that the
framework sees the GPU, was built with kernels for it, matches the cell's versions, loads cuDNN,
and can train a small convolutional model for a few mixed-precision steps on every GPU; on a node
with several GPUs (PyTorch), that NCCL all-reduces and DDP trains across all of them.

Standalone on purpose (stdlib, the framework and dl_stack.py beside it): it is copied into
images and also runs as a plain script on any host, so it must not import dlimages. It stays
compatible with Python 3.8, the oldest Python in the matrix.

Exit codes: 0 passed on a GPU, 1 a check failed, 2 usage error, 77 skipped (no GPU visible).
A cuDNN that cannot be loaded, even one that keeps the framework from importing, is a failed check (1).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import functools
import glob
import importlib
import json
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

# dl_stack.py lies beside this file, in images (/usr/local/bin) as in the source tree. Run as a plain
# script there is no package and the script's own folder comes first on sys.path; imported as
# dlimages.payload.dl_smoke (and by mypy) it is the package's sibling module.
if TYPE_CHECKING or __package__:
    from . import dl_stack
else:
    import dl_stack

DEFAULT_CELL_FILE = "/etc/dlimages/cell.json"
CELL_KEYS = (
    "framework",
    "framework_version",
    "cuda",
    "cudnn",
    "python",
    "min_driver",
    "compat_driver",
    "forward_compat_branches",
    "cuda_arch_list",
)
# A framework answers to its name and to its flag: pytorch or torch, tensorflow or tf.
FRAMEWORK_ALIASES = {alias: f.name for f in dl_stack.FRAMEWORKS.values() for alias in (f.name, f.flag)}

PASS = "pass"  # noqa: S105 (a check status, not a password)
FAIL = "fail"
SKIP = "skip"
INFO = "info"

# Minimum Linux driver per CUDA major under minor-version compatibility (CUDA release notes,
# table 2). Used only to word a driver failure when the cell gives no min_driver.
MIN_DRIVER_BY_CUDA_MAJOR = {
    10: "410.48",
    11: "450.80.02",
    12: "525.60.13",
    13: "580.65.06",
}

# Substrings of the frameworks' and CUDA's own messages; matched case-insensitively.
NO_KERNEL_PATTERNS = (
    "no kernel image is available",
    "cudaerrornokernelimagefordevice",
    "cuda_error_no_binary_for_gpu",
)
DRIVER_TOO_OLD_PATTERNS = (
    "driver on your system is too old",
    "cuda driver version is insufficient",
    "cudaerrorinsufficientdriver",
    "cuda_error_system_driver_mismatch",
    # PTX built by a newer toolchain than the driver can JIT: also a driver that is too old.
    "provided ptx was compiled with an unsupported toolchain",
    "cudaerrorunsupportedptxversion",
)
# cuDNN's, the loader's and the frameworks' own words for a cuDNN that cannot be loaded, in the order tried. Each
# regex captures (library, reason). Sources: torch's import (libtorch_cuda.so needs libcudnn.so.N), TF's dso_loader,
# cuDNN 8 and 9 loading the sub-libraries they split into (cuDNN 8 then aborts the process), torch's search of
# the nvidia-* wheels on sys.path, and a library from another cuDNN release (undefined symbol).
CUDNN_LOAD_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"could not load (?:dynamic )?library '?(libcudnn[\w.+-]*?)'?[.;]?\s+(?:error|dlerror)\s*:\s*([^\n]*)",
        r"(libcudnn[\w.+-]+)\s*:\s*(cannot open shared object file[^\n]*)",
        r"(?=unable to load any of \{(libcudnn[^,}\s]*))(unable to load any of \{[^}]*\})",
        r"(libcudnn\S*) (not found in the system path)",
        r"(libcudnn[\w.+-]+)\s*:\s*(undefined symbol: [^\s,]+)",
    )
)
CUDNN_MISMATCH_PATTERNS = (
    "cudnn version incompatibility",  # torch: compiled against X but found runtime version Y
    "loaded runtime cudnn library",  # TF: Loaded runtime CuDNN library: 8.1.0 but source was compiled with: 8.6.0
    "cudnn_status_version_mismatch",
    "cudnn_status_sublibrary_version_mismatch",
)
CUDNN_NOT_LOADED_PATTERNS = (
    "cudnn_status_sublibrary_loading_failed",
    "cudnn_status_not_initialized",  # torch: cuDNN could not start (a broken or mismatched library, rarely memory)
    "dnn library is not found",  # TF: UnimplementedError when no cuDNN was registered
    "cudnn failed to initialize",  # TF: Failed to get convolution algorithm. This is probably because cuDNN ...
    "could not create cudnn handle",  # TF
)
CUDNN_STATUS = re.compile(r"CUDNN_STATUS_[A-Z_]+", re.IGNORECASE)
# The sub-libraries libcudnn.so.N loads from its own folder when first used (cuDNN 8 and 9 release layouts). cuDNN 9
# ends the process without a word when one is missing, so dl-smoke looks for them itself to name the library.
CUDNN_SUBLIBRARIES = {
    8: ("adv_infer", "adv_train", "cnn_infer", "cnn_train", "ops_infer", "ops_train"),
    9: ("adv", "cnn", "engines_precompiled", "engines_runtime_compiled", "graph", "heuristic", "ops"),
}
_LIBCUDNN_PATH = re.compile(r"(/\S*/)?libcudnn\.so\.(\d+)(?:\.\d+)*$")
CUDNN_OTHER_FAILURES = ("unable to find an engine to execute this computation",)  # torch's cuDNN v8 API
# XLA, which Keras optimizers use on the GPU from TF 2.11 on, needs libdevice (CUDA's compiler packages) and ptxas.
XLA_PATTERNS = (
    ("libdevice not found", "libdevice"),
    ("can't find libdevice directory", "libdevice"),
    ("couldn't find libdevice", "libdevice"),
    ("couldn't get ptxas version", "ptxas"),
    ("can't find ptxas binary", "ptxas"),
    ("couldn't invoke ptxas", "ptxas"),
)
NO_KERNEL = "no_kernel_image"
DRIVER_TOO_OLD = "driver_too_old"
CUDNN_LOAD = "cudnn_load"  # cuDNN missing, not loadable or mismatched: "cuDNN could not be loaded"
CUDNN_FAILED = "cudnn_failed"  # cuDNN loaded but a call failed (CUDNN_STATUS_EXECUTION_FAILED, ...)

# The training step: a small convolutional model, so the step runs cuDNN convolutions (forward and backward) and
# batch norm; small enough to take well under a second, big enough that the loss has somewhere to go.
TRAIN_SAMPLES = 128
TRAIN_IMAGE = 16  # height and width of the synthetic images
TRAIN_CHANNELS = 3
TRAIN_WIDTH = 32  # channels of the first convolution; the second has twice as many
TRAIN_CLASSES = 8
TRAIN_LR = 1e-2
TRAIN_SEED = 0
# Multi-GPU: the all-reduce moves 16 MiB of float32 per GPU; the whole multi-GPU part must end in this time.
ALLREDUCE_ELEMENTS = 4 * 2**20
MULTI_GPU_TIMEOUT_S = 300
CUDNN_PROBE_TIMEOUT_S = 180
# A smoke test takes seconds; far more steps than this is a typo (or 10**30), a usage error rather than a long run.
MAX_STEPS = 10000
_DIGITS = re.compile("[0-9]+")


class Check(NamedTuple):
    name: str
    status: str
    detail: str


class Expectations(NamedTuple):
    framework: str | None
    framework_version: str | None
    cuda: str | None
    cudnn: str | None
    python: str | None
    min_driver: str | None
    cuda_arch_list: list[str] | None
    # Below min_driver the image may still run: CUDA minor-version compatibility from compat_driver (machine code
    # only, no PTX JIT), or forward compatibility through cuda-compat on these driver branches (data-center GPUs).
    compat_driver: str | None = None
    forward_compat_branches: tuple[str, ...] = ()


class RunOptions(NamedTuple):
    """How the training checks run, from the flags."""

    steps: int
    channels_last: bool  # the conv model and its images in channels_last (NHWC) layout (PyTorch)
    multi_gpu: bool  # NCCL all-reduce and DDP across all GPUs when several are visible (PyTorch)


class Probe(NamedTuple):
    """What one framework probe found; `gpu_visible` False means skip, not fail."""

    checks: list[Check]
    gpus: list[dict[str, Any]]
    versions: dict[str, str | None]
    gpu_visible: bool


# ---------------------------------------------------------------------------------------------
# Pure rules: versions, arch compatibility, error classification, outcome.
# ---------------------------------------------------------------------------------------------


def describe_no_kernel(capability: tuple[int, int], arch_list: Sequence[str]) -> str:
    return "no kernel image for {} in this build (build has: {})".format(
        dl_stack.arch_name(capability), " ".join(arch_list) if arch_list else "nothing listed"
    )


def version_matches(found: Sequence[int] | None, expected: Sequence[int], depth: int | None = None) -> bool:
    """True when `found` starts with `expected` (cut to `depth` parts, e.g. 2 = major.minor)."""
    if found is None:
        return False
    wanted = tuple(expected[:depth]) if depth is not None else tuple(expected)
    return tuple(found[: len(wanted)]) == wanted


def driver_is_sufficient(driver: str, min_driver: str) -> bool | None:
    have = dl_stack.parse_version(driver)
    need = dl_stack.parse_version(min_driver)
    if have is None or need is None:
        return None
    return have >= need


def classify_cuda_error(text: str) -> str | None:
    """NO_KERNEL, DRIVER_TOO_OLD or None for an error or log text from CUDA or a framework."""
    lowered = text.lower()
    if any(p in lowered for p in NO_KERNEL_PATTERNS):
        return NO_KERNEL
    if any(p in lowered for p in DRIVER_TOO_OLD_PATTERNS):
        return DRIVER_TOO_OLD
    return None


class CudnnProblem(NamedTuple):
    """What an error text says about cuDNN."""

    kind: str  # CUDNN_LOAD or CUDNN_FAILED
    library: str | None  # the cuDNN library it names, e.g. libcudnn_cnn_infer.so.8
    reason: str


def _line_with(text: str, needle: str) -> str:
    """The first line of `text` that holds `needle` (case-insensitive), cut as first_line cuts."""
    for line in text.splitlines():
        if needle.lower() in line.lower():
            return dl_stack.first_line(line.strip())
    return dl_stack.first_line(text)


def classify_cudnn_error(text: str) -> CudnnProblem | None:
    """A cuDNN that could not be loaded (or does not match), or a cuDNN call that failed; None if the text says neither.

    Example: classify_cudnn_error("libcudnn.so.9: cannot open shared object file: No such file or directory")
    == CudnnProblem("cudnn_load", "libcudnn.so.9", "cannot open shared object file: No such file or directory").
    """
    for pattern in CUDNN_LOAD_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            return CudnnProblem(CUDNN_LOAD, match.group(1).rstrip("."), dl_stack.first_line(match.group(2).strip()))
    named = re.search(r"libcudnn[\w.+-]*\.so[\d.]*\d", text, re.IGNORECASE)
    library = named.group(0) if named else None
    lowered = text.lower()
    for needle in (*CUDNN_MISMATCH_PATTERNS, *CUDNN_NOT_LOADED_PATTERNS):
        if needle in lowered:
            return CudnnProblem(CUDNN_LOAD, library, _line_with(text, needle))
    status = CUDNN_STATUS.search(text)
    if status is not None:
        return CudnnProblem(CUDNN_FAILED, library, _line_with(text, status.group(0)))
    for needle in CUDNN_OTHER_FAILURES:
        if needle in lowered:
            return CudnnProblem(CUDNN_FAILED, library, _line_with(text, needle))
    return None


def missing_cudnn_sublibraries(maps: str, exists: Callable[[str], bool] = os.path.exists) -> str | None:
    """Which of cuDNN's sub-libraries are missing beside the libcudnn.so.N a process mapped, from the text of its
    /proc/self/maps; None when that library is not mapped or nothing is missing.

    Example: "libcudnn_graph.so.9, libcudnn_ops.so.9 missing beside /opt/venv/nvidia/cudnn/lib/libcudnn.so.9"."""
    for line in maps.splitlines():
        fields = line.split()
        match = _LIBCUDNN_PATH.match(fields[-1]) if len(fields) >= 6 else None
        if match is None:
            continue
        path, major = fields[-1], int(match.group(2))
        folder = os.path.dirname(path)
        names = [f"libcudnn_{part}.so.{major}" for part in CUDNN_SUBLIBRARIES.get(major, ())]
        missing = [name for name in names if not exists(os.path.join(folder, name))]
        return "{} missing beside {}".format(", ".join(missing), path) if missing else None
    return None


def cudnn_sublibrary_hint() -> str | None:
    """missing_cudnn_sublibraries for this process, which maps libcudnn.so.N with torch; a file check, no cuDNN call."""
    try:
        with open("/proc/self/maps") as handle:
            return missing_cudnn_sublibraries(handle.read())
    except OSError:  # not Linux
        return None


def describe_cudnn_problem(problem: CudnnProblem) -> str:
    """ "cuDNN could not be loaded: <library>: <reason>", or "cuDNN failed: <reason>"."""
    if problem.kind == CUDNN_FAILED:
        return f"cuDNN failed: {problem.reason}"
    named = problem.library and problem.library.lower() not in problem.reason.lower()
    return "cuDNN could not be loaded: {}{}".format(f"{problem.library}: " if named else "", problem.reason)


def classify_xla_error(text: str) -> str | None:
    """ "libdevice" or "ptxas" when XLA could not compile for the GPU for want of CUDA's compiler files; else None."""
    lowered = text.lower()
    for needle, missing in XLA_PATTERNS:
        if needle in lowered:
            return missing
    return None


def describe_xla_problem(missing: str, text: str) -> str:
    if missing == "libdevice":
        what = "libdevice not found (libdevice.10.bc, from CUDA's compiler packages"
        needle = "libdevice"
    else:
        what = "ptxas not found (from CUDA's compiler packages"
        needle = "ptxas"
    return (
        f"XLA could not compile for the GPU: {what}: cuda-nvcc or the nvidia-cuda-nvcc wheel; Keras optimizers "
        f"compile their update step with XLA on the GPU from TF 2.11 on): {_line_with(text, needle)}"
    )


def describe_driver_too_old(cuda: str | None, min_driver: str | None, driver: str | None) -> str:
    needed = min_driver
    cuda_parts = dl_stack.parse_version(cuda)
    if needed is None and cuda_parts is not None:
        needed = MIN_DRIVER_BY_CUDA_MAJOR.get(cuda_parts[0])
    text = "driver too old for CUDA {} (needs >= {})".format(cuda or "unknown", needed or "a newer driver")
    if driver:
        text += f"; found driver {driver}"
    return text


def describe_cuda_failure(
    text: str,
    *,
    capability: tuple[int, int] | None,
    arch_list: Sequence[str] | None,
    cuda: str | None,
    exp: Expectations,
    driver: str | None,
    log: str = "",
) -> str:
    """A failed training step in the checks' words: no kernel, driver too old, cuDNN, XLA, else the error's first line.

    `log` is what native code wrote to stderr (TF logs CUDA errors there): it helps classify, it is not shown.
    """
    both = f"{text}\n{log}"
    kind = classify_cuda_error(both)
    if kind == DRIVER_TOO_OLD:
        return describe_driver_too_old(cuda, exp.min_driver, driver)
    if kind == NO_KERNEL and capability is not None:
        return describe_no_kernel(capability, arch_list or [])
    cudnn = classify_cudnn_error(both)
    if cudnn is not None:
        return describe_cudnn_problem(cudnn)
    missing = classify_xla_error(both)
    if missing is not None:
        return describe_xla_problem(missing, both)
    return dl_stack.first_line(text)


def compare_check(
    name: str,
    label: str,
    found: tuple[int, ...] | None,
    found_text: str | None,
    expected: str | None,
    depth: int | None,
) -> Check:
    """PASS/FAIL a version against an expectation; SKIP ("not checked") without one."""
    shown = found_text if found_text is not None else "none"
    if expected is None:
        return Check(name, SKIP, f"not checked (no expectation); found {shown}")
    wanted = dl_stack.parse_version(expected)
    if wanted is None:
        return Check(name, FAIL, f"cannot parse expected {label} {expected!r}")
    if version_matches(found, wanted, depth):
        return Check(name, PASS, f"{shown} (expected {expected})")
    return Check(name, FAIL, f"{label} version mismatch: found {shown}, expected {expected}")


def arch_list_check(build: Sequence[str] | None, expected: Sequence[str] | None) -> Check:
    """Every arch the cell asked for must be in the build (sm_90a also covers sm_90)."""
    if expected is None:
        return Check(
            "build_arch_list",
            SKIP,
            "not checked (no expectation); build has {}".format(" ".join(build) if build else "unknown"),
        )
    if build is None:
        return Check("build_arch_list", FAIL, "build reports no arch list; expected {}".format(" ".join(expected)))
    have = {a.strip().lower().rstrip("af") for a in build}
    missing = [a for a in expected if a.strip().lower().rstrip("af") not in have]
    if missing:
        return Check(
            "build_arch_list", FAIL, "build lacks {} (build has: {})".format(" ".join(missing), " ".join(build))
        )
    return Check("build_arch_list", PASS, " ".join(build))


def gpu_arch_check(
    index: int, gpu_name: str, capability: tuple[int, int] | None, arch_list: Sequence[str] | None, unknown: str
) -> Check:
    """Which entry of the build's arch list GPU `index` runs, or FAIL naming what the build has.

    `unknown` is the SKIP detail for when the capability or the arch list cannot be read.
    """
    name = f"arch[{index}]"
    if capability is None or arch_list is None:
        return Check(name, SKIP, unknown)
    entry = dl_stack.kernel_for_capability(capability, arch_list)
    if entry is None:
        return Check(name, FAIL, describe_no_kernel(capability, arch_list))
    jit = " (JIT from PTX)" if entry.startswith("compute") else ""
    return Check(name, PASS, f"{gpu_name} {dl_stack.arch_name(capability)} runs {entry}{jit}")


def loss_decreased(losses: Sequence[float], window: int = 3) -> bool:
    """Mean of the last `window` losses below the mean of the first `window`, all finite."""
    if len(losses) < 2 * window:
        return False
    if any(loss != loss or loss in (float("inf"), float("-inf")) for loss in losses):
        return False
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    return last < first


def describe_losses(losses: Sequence[float]) -> str:
    return f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps"


def loss_check(name: str, losses: Sequence[float], model: str) -> Check:
    """PASS when the loss fell; `model` says what was trained ("conv + batch norm")."""
    if loss_decreased(losses):
        return Check(name, PASS, f"{describe_losses(losses)} ({model})")
    return Check(name, FAIL, f"loss did not decrease: {describe_losses(losses)} ({model})")


def decide_outcome(checks: Sequence[Check], gpu_visible: bool) -> tuple[str, int]:
    """A failed check beats everything; without a GPU the run is skipped, never passed."""
    if any(c.status == FAIL for c in checks):
        return "failed", dl_stack.EXIT_FAILED
    if not gpu_visible:
        return "skipped", dl_stack.EXIT_SKIPPED
    return "passed", dl_stack.EXIT_PASSED


def normalize_framework(name: str | None) -> str | None:
    if name is None:
        return None
    key = name.strip().lower()
    if key not in FRAMEWORK_ALIASES:
        raise dl_stack.UsageError("unknown framework {!r} (use {})".format(name, " or ".join(dl_stack.FRAMEWORKS)))
    return FRAMEWORK_ALIASES[key]


def validate_cell(data: Any, source: str) -> dict[str, Any]:
    """Check the types of the keys this script reads; report every problem at once.

    Other keys are left alone on purpose: cell.json is the renderer's full record of the cell
    (base image, tags, ...), whose schema the renderer validates; this script is one reader.
    """
    if not isinstance(data, dict):
        raise dl_stack.UsageError(f"{source}: expected a JSON object")
    problems = []
    for key in CELL_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if key == "forward_compat_branches":
            if not isinstance(value, list) or not all(isinstance(b, (str, int)) for b in value):
                problems.append('forward_compat_branches must be a list of driver branches like "470"')
        elif key == "cuda_arch_list":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                problems.append('cuda_arch_list must be a list of strings like "sm_90"')
            else:
                bad = [a for a in value if dl_stack.parse_arch(a) is None]
                if bad:
                    problems.append("cuda_arch_list has entries that are not archs: {}".format(", ".join(bad)))
        elif not isinstance(value, (str, int, float)):
            problems.append(f"{key} must be a string")
    if problems:
        raise dl_stack.UsageError("{}: {}".format(source, "; ".join(problems)))
    return {k: data[k] for k in CELL_KEYS if data.get(k) is not None}


def resolve_expectations(cell: dict[str, Any], args: argparse.Namespace) -> Expectations:
    """Flags override the cell file; what neither gives stays None ("not checked")."""

    def pick(flag: str | None, key: str) -> str | None:
        if flag is not None:
            return flag
        value = cell.get(key)
        return None if value is None else str(value)

    arch_list = cell.get("cuda_arch_list")
    return Expectations(
        framework=normalize_framework(pick(None, "framework")),
        framework_version=pick(args.expect_framework_version, "framework_version"),
        cuda=pick(args.expect_cuda, "cuda"),
        cudnn=pick(args.expect_cudnn, "cudnn"),
        python=pick(None, "python"),
        min_driver=pick(None, "min_driver"),
        cuda_arch_list=list(arch_list) if arch_list is not None else None,
        compat_driver=pick(None, "compat_driver"),
        forward_compat_branches=tuple(str(b) for b in cell.get("forward_compat_branches") or ()),
    )


def choose_framework(requested: str, expected: str | None) -> list[str]:
    """Frameworks to try in order: an explicit flag, else the cell's, else torch then TF."""
    if requested != "auto":
        return [requested]
    if expected is not None:
        return [expected]
    return list(dl_stack.FRAMEWORKS)


def build_report(framework: str, probe: Probe, checks: Sequence[Check]) -> dict[str, Any]:
    status, code = decide_outcome(checks, probe.gpu_visible)
    return {
        "status": status,
        "exit_code": code,
        "framework": framework,
        "checks": [c._asdict() for c in checks],
        "gpus": probe.gpus,
        "versions": probe.versions,
    }


def render_human(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = ["dl-smoke: {} {}".format(report["framework"], versions.get("framework") or "").rstrip()]
    width = max([len(c["name"]) for c in report["checks"]] + [8])
    for check in report["checks"]:
        lines.append("{:<4}  {:<{w}}  {}".format(check["status"].upper(), check["name"], check["detail"], w=width))
    lines.append("RESULT {} (exit {})".format(report["status"], report["exit_code"]))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Host facts (side effects kept small: read-only subprocess and file lookups).
# ---------------------------------------------------------------------------------------------


def host_has_gpu() -> bool:
    """A GPU device node is present, i.e. a GPU was handed to this host or container."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def gpus_hidden_by_env() -> bool:
    """CUDA_VISIBLE_DEVICES set to nothing hides every GPU on purpose: a skip, not a failure."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1", "none", "NoDevFiles")


class _NativeStderr:
    """Capture what C++ code writes to fd 2 (TF logs CUDA init errors there, not in Python)."""

    def __init__(self) -> None:
        self.text = ""
        self._saved = -1
        self._file: Any = None

    def __enter__(self) -> _NativeStderr:
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()


def common_checks(exp: Expectations, driver: str | None) -> list[Check]:
    """Checks that need no framework: Python version and the driver against min_driver."""
    checks = [
        compare_check(
            "python_version",
            "Python",
            tuple(sys.version_info[:3]),
            dl_stack.python_version(),
            exp.python,
            2,
        )
    ]
    if driver is None:
        checks.append(
            Check(
                "driver", SKIP if exp.min_driver is None else INFO, "driver version unknown (no nvidia-smi, no pynvml)"
            )
        )
    elif exp.min_driver is None:
        checks.append(Check("driver", SKIP, f"not checked (no min_driver expectation); found {driver}"))
    else:
        checks.append(driver_check(exp, driver))
    return checks


def driver_check(exp: Expectations, driver: str) -> Check:
    """The driver against the image's rule: the toolkit's driver, else the minor-version floor (the CUDA work that
    follows proves there was machine code for the GPU), else a cuda-compat branch (data-center GPUs only)."""
    assert exp.min_driver is not None
    if driver_is_sufficient(driver, exp.min_driver):
        return Check("driver", PASS, f"{driver} (needs >= {exp.min_driver})")
    if exp.compat_driver is not None and driver_is_sufficient(driver, exp.compat_driver):
        return Check(
            "driver",
            PASS,
            f"{driver}: below the toolkit's {exp.min_driver}, runs through CUDA minor-version compatibility "
            f"(from {exp.compat_driver}; machine code only, no PTX JIT)",
        )
    branch = driver.split(".", 1)[0]
    if branch in exp.forward_compat_branches:
        return Check(
            "driver",
            PASS,
            f"{driver}: below the toolkit's {exp.min_driver}, runs through forward compatibility (the image's "
            f"cuda-compat on driver branch {branch}; data-center GPUs only)",
        )
    return Check("driver", FAIL, describe_driver_too_old(exp.cuda, exp.compat_driver or exp.min_driver, driver))


def probe_versions(
    framework: str | None, cuda: str | None, cudnn: str | None, driver: str | None
) -> dict[str, str | None]:
    return {"python": dl_stack.python_version(), "framework": framework, "cuda": cuda, "cudnn": cudnn, "driver": driver}


def version_checks(label: str, versions: dict[str, str | None], exp: Expectations) -> list[Check]:
    """The framework's and its CUDA's versions against the cell."""
    framework, cuda = versions["framework"], versions["cuda"]
    return [
        compare_check(
            "framework_version", label, dl_stack.parse_version(framework), framework, exp.framework_version, None
        ),
        compare_check("cuda_version", "CUDA", dl_stack.parse_version(cuda), cuda, exp.cuda, 2),
    ]


def unavailable_check(
    name: str,
    reason: str,
    built_with_cuda: bool,
    cuda: str | None,
    exp: Expectations,
    driver: str | None,
) -> tuple[Check, bool]:
    """Why the framework sees no GPU: (check, gpu_visible). gpu_visible False means skip.

    A GPU node present but unusable is a failure, never a skip: that is exactly the image
    that would silently train on the CPU.
    """
    kind = classify_cuda_error(reason)
    if kind == DRIVER_TOO_OLD:
        return Check(name, FAIL, describe_driver_too_old(cuda or exp.cuda, exp.min_driver, driver)), True
    if host_has_gpu() and not gpus_hidden_by_env():
        if not built_with_cuda:
            return Check(
                name, FAIL, "a GPU is present but this framework build has no CUDA support (CPU-only build)"
            ), True
        return Check(
            name,
            FAIL,
            "a GPU is present but the framework cannot use it: {}".format(
                dl_stack.first_line(reason) if reason.strip() else "no reason given"
            ),
        ), True
    detail = "no GPU visible"
    if reason.strip():
        detail += f" ({dl_stack.first_line(reason)})"
    return Check(name, SKIP, detail), False


# ---------------------------------------------------------------------------------------------
# PyTorch.
# ---------------------------------------------------------------------------------------------


def _off_gpu(tensors: dict[str, Any]) -> list[str]:
    return [name for name, t in tensors.items() if t is not None and not t.is_cuda]


def conv_model(torch: ModuleType) -> Any:
    """Two convolutions with batch norm, pooled into a linear classifier: cuDNN's convolution and batch-norm kernels,
    forward and backward, in a model that trains in a few steps."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(TRAIN_CHANNELS, TRAIN_WIDTH, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(TRAIN_WIDTH),
        nn.ReLU(),
        nn.Conv2d(TRAIN_WIDTH, 2 * TRAIN_WIDTH, kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(2 * TRAIN_WIDTH),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * TRAIN_WIDTH, TRAIN_CLASSES),
    )


def train_torch(
    torch: ModuleType,
    device: Any,
    dtype_name: str | None,
    steps: int,
    channels_last: bool,
    rank: int = 0,
    wrap: Callable[[Any], Any] | None = None,
) -> tuple[list[float], Any]:
    """A real AMP training loop of the conv model on `device`: (losses, model). Raises on any tensor off the GPU or
    autocast unused. `wrap` puts the model under DDP; each `rank` then draws its own images of the same task.
    dtype_name None trains in float32 (the CPU tests of the multi-process path)."""
    dtype = getattr(torch, dtype_name) if dtype_name else None
    layout = torch.channels_last if channels_last else torch.contiguous_format
    torch.manual_seed(TRAIN_SEED)
    model = conv_model(torch).to(device).to(memory_format=layout)
    teacher = torch.randn(TRAIN_CHANNELS, TRAIN_CLASSES, device=device)
    torch.manual_seed(TRAIN_SEED + 1 + rank)
    x = torch.randn(TRAIN_SAMPLES, TRAIN_CHANNELS, TRAIN_IMAGE, TRAIN_IMAGE, device=device)
    x = x.contiguous(memory_format=layout)
    y = (x.mean(dim=(2, 3)) @ teacher).argmax(dim=1)  # learnable labels: the mean colour decides the class
    net = wrap(model) if wrap is not None else model
    optimizer = torch.optim.Adam(net.parameters(), lr=TRAIN_LR)
    # bf16 has fp32's range, so only fp16 needs loss scaling.
    scaler = dl_stack.torch_grad_scaler(torch) if dtype is torch.float16 else None
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with dl_stack.torch_autocast(torch, dtype_name):
            logits = net(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
        if dtype is not None and logits.dtype != dtype:
            raise RuntimeError(f"autocast did not engage: logits are {logits.dtype}, expected {dtype}")
        dl_stack.torch_backward_step(loss, optimizer, scaler)
        losses.append(float(loss.item()))
    if device.type == "cuda":
        tensors = {"x": x, "y": y, "logits": logits, "loss": loss}
        for name, param in model.named_parameters():
            tensors["param " + name] = param
            tensors["grad " + name] = param.grad
        for index, state in enumerate(optimizer.state.values()):
            for key, value in state.items():
                if hasattr(value, "is_cuda") and value.dim() > 0:
                    tensors[f"optimizer state {index} {key}"] = value
        off = _off_gpu(tensors)
        if off:
            raise RuntimeError("tensors not on cuda (CPU fallback): {}".format(", ".join(off)))
    return losses, model


def _layout(channels_last: bool) -> str:
    return "conv + batch norm, channels_last" if channels_last else "conv + batch norm"


def torch_train_check(
    torch: ModuleType, index: int, dtype_name: str, options: RunOptions, describe_error: Callable[[str], str]
) -> Check:
    name = "train_{}[{}]".format("amp_fp16" if dtype_name == "float16" else "amp_bf16", index)
    try:
        losses, _ = train_torch(torch, torch.device("cuda", index), dtype_name, options.steps, options.channels_last)
    except RuntimeError as error:
        return Check(name, FAIL, describe_error(str(error)))
    return loss_check(name, losses, _layout(options.channels_last))


def cudnn_probe_worker(
    rank: int,
    world: int,
    workdir: str,
    note: Callable[..., None],
    index: int,
    dtype: str,
    channels_last: bool,
    convolve: bool,
) -> dict[str, Any]:
    """In a fresh process: load cuDNN (its version), then run one convolution forward and backward on GPU `index`.

    A fresh process because cuDNN ends the process when a library it needs cannot be loaded: cuDNN 8 when it first
    loads a sub-library (libcudnn_cnn_infer.so.8), cuDNN 9's libcudnn.so.9 at the first call it forwards to a missing
    one (even the version query). The parent survives to name the library, and asks cuDNN nothing before this."""
    note("import torch")
    torch = importlib.import_module("torch")
    note("cudnn version")
    version = torch.backends.cudnn.version()  # raises "cuDNN version incompatibility" for a mismatched library
    if version is None:
        raise RuntimeError("torch.backends.cudnn.version() is None: torch found no usable libcudnn")
    if not convolve:
        return {"cudnn": version, "convolved": False}
    note("convolution", {"cudnn": version})
    device = torch.device("cuda", index)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    conv = torch.nn.Conv2d(TRAIN_CHANNELS, TRAIN_WIDTH, kernel_size=3, padding=1).to(device).to(memory_format=layout)
    x = torch.randn(8, TRAIN_CHANNELS, TRAIN_IMAGE, TRAIN_IMAGE, device=device).contiguous(memory_format=layout)
    with dl_stack.torch_autocast(torch, dtype):
        out = conv(x.requires_grad_())
    out.float().square().mean().backward()
    torch.cuda.synchronize(device)
    return {"cudnn": version, "convolved": True}


def run_cudnn_probe(index: int, dtype: str, channels_last: bool, convolve: bool) -> dl_stack.WorkerOutcome:
    """cudnn_probe_worker's outcome (the unit tests put a fake here)."""
    args = (index, dtype, channels_last, convolve)
    return dl_stack.run_workers(cudnn_probe_worker, 1, args, timeout_s=CUDNN_PROBE_TIMEOUT_S)[0]


def cudnn_load_check(
    outcome: dl_stack.WorkerOutcome, gpu: str, describe_error: Callable[[str], str], missing: str | None = None
) -> tuple[Check, tuple[int, ...] | None]:
    """The cudnn_load check and cuDNN's version from the probe's outcome: cuDNN's own words first, then the
    sub-libraries `missing` beside libcudnn.so.N (cudnn_sublibrary_hint), the process's fate after them."""
    data = outcome.value if isinstance(outcome.value, dict) else {}
    version = dl_stack.decode_cudnn_version(data.get("cudnn"))
    shown = dl_stack.format_version(version)
    if outcome.state == dl_stack.OK:
        if not data.get("convolved"):
            return Check(CUDNN_LOAD, SKIP, f"cuDNN {shown} loaded; no convolution run: no GPU has kernels"), version
        return Check(
            CUDNN_LOAD, PASS, f"cuDNN {shown} loaded; a convolution ran forward and backward on {gpu}"
        ), version
    text = f"{outcome.error}\n{outcome.output}"
    problem = classify_cudnn_error(text)
    last_words = [line.strip() for line in outcome.output.splitlines() if line.strip()]
    if problem is not None:
        detail = describe_cudnn_problem(problem)
    elif missing is not None and outcome.state != dl_stack.ERROR:
        detail = f"cuDNN could not be loaded: {missing}"
    elif outcome.stage in ("import torch", "cudnn version"):
        detail = "cuDNN could not be loaded: " + dl_stack.first_line(outcome.error)
        if outcome.state != dl_stack.ERROR and last_words:
            detail += "; its last output: " + dl_stack.first_line(last_words[-1], 200)
    else:
        detail = f"a convolution on {gpu} failed: " + describe_error(
            outcome.error if outcome.state == dl_stack.ERROR else text
        )
    if outcome.state != dl_stack.ERROR:
        detail += f" (the test process {outcome.error}, at {outcome.stage})"
    return Check(CUDNN_LOAD, FAIL, detail), version


# --- several GPUs: NCCL all-reduce and DDP, one process per GPU ------------------------------------------------


def multi_gpu_worker(rank: int, world: int, workdir: str, note: Callable[..., None], plan: dict[str, Any]) -> Any:
    """One rank of the multi-GPU check: all-reduce a known sum, then train the conv model under DDP.

    plan: backend ("nccl"; "gloo" in the CPU tests), device ("cuda" or "cpu"), dtype (autocast, or None), steps,
    channels_last, elements (per all-reduce), timeout_s."""
    torch = importlib.import_module("torch")
    cuda = plan["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    note("init")
    dl_stack.torch_init_process_group(torch, plan["backend"], workdir, rank, world, plan["timeout_s"])
    dist = torch.distributed
    note("all_reduce")
    x = torch.full((plan["elements"],), float(rank + 1), device=device)
    dist.all_reduce(x)
    low, high, expected = float(x.min()), float(x.max()), world * (world + 1) / 2
    if low != expected or high != expected:
        raise RuntimeError(f"all-reduce gave {low:g}..{high:g}, expected {expected:g} everywhere")
    note("ddp")
    losses, model = train_torch(
        torch,
        device,
        plan["dtype"],
        plan["steps"],
        plan["channels_last"],
        rank=rank,
        wrap=lambda net: dl_stack.torch_ddp(torch, net, rank if cuda else None),
    )
    note("replicas")
    # DDP keeps every replica identical: compare each rank's parameters with rank 0's.
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, 0)
    drift = float((flat - reference).abs().max())
    dist.destroy_process_group()
    return {"losses": losses, "drift": drift}


def round_robin(count: int) -> list[list[tuple[int, int]]]:
    """Every pair of `count` GPUs once, in rounds of disjoint pairs that can run at the same time (circle method).

    Example: round_robin(4) == [[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]."""
    players: list[int | None] = [*range(count), *([None] if count % 2 else [])]
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def pair_worker(rank: int, world: int, workdir: str, note: Callable[..., None], plan: dict[str, Any]) -> Any:
    """One rank of the link diagnosis: an all-reduce within every pair of GPUs this rank belongs to."""
    torch = importlib.import_module("torch")
    cuda = plan["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    note("init")
    dl_stack.torch_init_process_group(torch, plan["backend"], workdir, rank, world, plan["timeout_s"])
    dist = torch.distributed
    rounds = round_robin(world)
    # Every rank creates every group, in the same order, as torch.distributed requires.
    groups = {pair: dist.new_group(list(pair)) for pairs in rounds for pair in pairs}
    results: dict[str, str] = {}
    for pairs in rounds:
        for a, b in pairs:
            if rank not in (a, b):
                continue
            note(f"pair {a}-{b}", results)
            x = torch.full((plan["elements"],), float(rank + 1), device=device)
            try:
                dist.all_reduce(x, group=groups[(a, b)])
                low, high = float(x.min()), float(x.max())
            except Exception as error:  # a broken link raises here; the rank goes on with its other pairs
                results[f"{a}-{b}"] = f"{type(error).__name__}: {dl_stack.first_line(str(error))}"
                continue
            expected = float(a + b + 2)
            ok = low == expected and high == expected
            results[f"{a}-{b}"] = "ok" if ok else f"all-reduce gave {low:g}..{high:g}, expected {expected:g}"
    note("done", results)
    dist.destroy_process_group()
    return results


def run_multi_gpu(worker: Callable[..., Any], count: int, plan: dict[str, Any]) -> list[dl_stack.WorkerOutcome]:
    """The workers' outcomes (the unit tests put a fake here)."""
    return dl_stack.run_workers(worker, count, (plan,), timeout_s=plan["timeout_s"])


def describe_peers(peers: Sequence[tuple[int, int]], count: int) -> str:
    if not peers:
        return "no peer-to-peer access between the GPUs: NCCL goes through host memory"
    if len(peers) == count * (count - 1) // 2:
        return "peer-to-peer access between every pair"
    return "peer-to-peer access only for " + ", ".join(f"{a}<->{b}" for a, b in peers)


def summarize_multi_gpu(
    outcomes: Sequence[dl_stack.WorkerOutcome],
    names: Sequence[str],
    plan: dict[str, Any],
    peers: Sequence[tuple[int, int]],
    nccl: str | None,
) -> list[Check]:
    """The nccl_allreduce and ddp_train checks from each rank's outcome, naming the GPU that failed."""
    count = len(outcomes)
    size = "{} float32".format(dl_stack.size_text(plan["elements"] * 4))
    past_all_reduce = all(o.state == dl_stack.OK or o.stage in ("ddp", "replicas") for o in outcomes)
    if past_all_reduce:
        allreduce = Check(
            "nccl_allreduce",
            PASS,
            "{} GPUs summed {} each correctly (NCCL {}; {})".format(
                count, size, nccl or "unknown", describe_peers(peers, count)
            ),
        )
    else:
        detail = dl_stack.describe_worker_failures(outcomes, names)
        if count == 2:
            detail += f"; suspect GPU 0, GPU 1 or the link between them ({describe_peers(peers, count)})"
        return [Check("nccl_allreduce", FAIL, detail), Check("ddp_train", SKIP, "not run: the all-reduce failed")]
    if any(o.state != dl_stack.OK for o in outcomes):
        return [allreduce, Check("ddp_train", FAIL, dl_stack.describe_worker_failures(outcomes, names))]
    mode = "{} autocast".format(plan["dtype"]) if plan["dtype"] else "float32"
    not_learning = [o.rank for o in outcomes if not loss_decreased(o.value["losses"])]
    drift = max(o.value["drift"] for o in outcomes)
    if not_learning:
        gpus = ", ".join(f"GPU {rank}" for rank in not_learning)
        losses = outcomes[not_learning[0]].value["losses"]
        return [allreduce, Check("ddp_train", FAIL, f"loss did not decrease on {gpus}: {describe_losses(losses)}")]
    if not drift <= 1e-6:
        worst = max(outcomes, key=lambda o: o.value["drift"]).rank
        detail = f"replicas drifted apart: GPU {worst}'s parameters differ from GPU 0's by {drift:g}"
        return [allreduce, Check("ddp_train", FAIL, detail)]
    losses = outcomes[0].value["losses"]
    detail = "{} GPUs, {}, {}: {} on GPU 0; replicas identical".format(
        count, mode, _layout(plan["channels_last"]), describe_losses(losses)
    )
    return [allreduce, Check("ddp_train", PASS, detail)]


def link_checks(outcomes: Sequence[dl_stack.WorkerOutcome], names: Sequence[str]) -> list[Check]:
    """nccl_link[a-b] for every pair, from pair_worker's outcomes: which link between two GPUs fails."""
    checks = []
    for a, b in sorted(pair for pairs in round_robin(len(outcomes)) for pair in pairs):
        key = f"{a}-{b}"
        said = [o.value.get(key) for o in (outcomes[a], outcomes[b]) if isinstance(o.value, dict)]
        name = f"nccl_link[{key}]"
        link = f"GPU {a} ({names[a]}) <-> GPU {b} ({names[b]})"
        if len(said) == 2 and said == ["ok", "ok"]:
            checks.append(Check(name, PASS, f"{link}: all-reduce correct"))
        elif any(s not in (None, "ok") for s in said):
            checks.append(Check(name, FAIL, "{}: {}".format(link, next(s for s in said if s not in (None, "ok")))))
        elif any(o.stage == f"pair {key}" for o in (outcomes[a], outcomes[b])):
            checks.append(Check(name, FAIL, f"{link}: the all-reduce did not complete (hung or the process died)"))
        else:
            checks.append(Check(name, SKIP, f"{link}: not reached"))
    return checks


def multi_gpu_checks(
    torch: ModuleType, gpus: Sequence[dict[str, Any]], options: RunOptions, nccl: str | None
) -> list[Check]:
    """NCCL all-reduce and a DDP step across every visible GPU, one process per GPU; on failure with more than two
    GPUs, an all-reduce per pair of GPUs names the links that fail."""
    count = len(gpus)
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_nccl_available():
        return [Check("nccl_allreduce", FAIL, f"{count} GPUs visible but this torch has no NCCL (torch.distributed)")]
    bf16 = hasattr(torch, "autocast") and all(float(g["capability"]) >= 8.0 for g in gpus)
    plan = {
        "backend": "nccl",
        "device": "cuda",
        "dtype": "bfloat16" if bf16 else "float16",
        "steps": options.steps,
        "channels_last": options.channels_last,
        "elements": ALLREDUCE_ELEMENTS,
        "timeout_s": MULTI_GPU_TIMEOUT_S,
    }
    names = [str(g["name"]) for g in gpus]
    peers = dl_stack.peer_access(torch, count)
    torch.cuda.empty_cache()  # the per-GPU steps' cached memory is the workers' now
    checks = summarize_multi_gpu(run_multi_gpu(multi_gpu_worker, count, plan), names, plan, peers, nccl)
    if checks[0].status == FAIL and count > 2:
        checks += link_checks(run_multi_gpu(pair_worker, count, plan), names)
    return checks


def probe_torch(torch: ModuleType, exp: Expectations, options: RunOptions, driver: str | None) -> Probe:
    cuda = torch.version.cuda
    versions = probe_versions(torch.__version__, cuda, None, driver)
    checks = version_checks("torch", versions, exp)
    # is_available() warns (rather than raises) when the driver is too old; keep the text.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    if not available:
        reason = " ".join(str(w.message) for w in caught)
        if cuda is not None:
            try:
                torch.cuda.init()
            except Exception as error:  # the init error is the most precise reason there is
                reason = (reason + " " + str(error)).strip()
        check, visible = unavailable_check("cuda_available", reason, cuda is not None, cuda, exp, driver)
        return Probe([*checks, check], [], versions, visible)

    count = torch.cuda.device_count()
    checks.append(Check("cuda_available", PASS, f"{count} GPU(s) visible"))
    arch_list = list(torch.cuda.get_arch_list()) if hasattr(torch.cuda, "get_arch_list") else None
    checks.append(arch_list_check(arch_list, exp.cuda_arch_list))

    versions["nccl"] = dl_stack.nccl_version_text(torch)

    gpus = []
    runnable = []  # GPUs the build has kernels for: training would only repeat an arch failure, less readably
    for index in range(count):
        major, minor = torch.cuda.get_device_capability(index)
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "capability": f"{major}.{minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
            }
        )
        unknown = "this torch has no get_arch_list(); not checked"
        arch = gpu_arch_check(index, gpus[-1]["name"], (major, minor), arch_list, unknown)
        checks.append(arch)
        if arch.status != FAIL:
            runnable.append(index)

    def describe_error(index: int, text: str) -> str:
        major, minor = gpus[index]["capability"].split(".")
        capability = (int(major), int(minor))
        return describe_cuda_failure(
            text, capability=capability, arch_list=arch_list, cuda=cuda, exp=exp, driver=driver
        )

    # This process asks cuDNN nothing (not even its version) until a fresh one has loaded it and run a convolution:
    # a cuDNN that cannot load its libraries ends the process that calls it.
    cudnn_parts = None
    if not torch.backends.cudnn.is_available():  # a build-time flag: no cuDNN call
        checks.append(Check(CUDNN_LOAD, FAIL, "cuDNN could not be loaded: this torch has none (built without cuDNN)"))
    else:
        first = runnable[0] if runnable else 0
        outcome = run_cudnn_probe(first, "float16", options.channels_last, bool(runnable))
        gpu = "GPU {} ({})".format(first, gpus[first]["name"])
        missing = cudnn_sublibrary_hint() if outcome.state != dl_stack.OK else None
        check, cudnn_parts = cudnn_load_check(outcome, gpu, functools.partial(describe_error, first), missing)
        checks.append(check)
    cudnn_loaded = checks[-1].status != FAIL
    if cudnn_parts is not None:
        versions["cudnn"] = dl_stack.format_version(cudnn_parts)
    checks.append(compare_check("cudnn_version", "cuDNN", cudnn_parts, versions["cudnn"], exp.cudnn, 2))

    bf16 = getattr(torch.cuda, "is_bf16_supported", None)
    for index in runnable:
        if not cudnn_loaded:
            checks.append(Check(f"train[{index}]", SKIP, "not run: cuDNN could not be loaded (see cudnn_load)"))
            continue
        describe = functools.partial(describe_error, index)
        checks.append(torch_train_check(torch, index, "float16", options, describe))
        with torch.cuda.device(index):
            bf16_ok = bf16 is not None and hasattr(torch, "autocast") and bf16()
        if bf16_ok:
            checks.append(torch_train_check(torch, index, "bfloat16", options, describe))
        else:
            checks.append(Check(f"train_amp_bf16[{index}]", SKIP, "bf16 not supported by this GPU or torch"))

    if count > 1:
        if not options.multi_gpu:
            checks.append(Check("multi_gpu", SKIP, f"{count} GPUs visible; not run (--no-multi-gpu)"))
        elif len(runnable) < count or not cudnn_loaded:
            checks.append(Check("multi_gpu", SKIP, f"{count} GPUs visible; not run: a GPU failed the checks above"))
        else:
            checks += multi_gpu_checks(torch, gpus, options, versions["nccl"])
    return Probe(checks, gpus, versions, True)


# ---------------------------------------------------------------------------------------------
# TensorFlow.
# ---------------------------------------------------------------------------------------------


def tf_set_policy(tf: ModuleType, policy: Any) -> None:
    # set_global_policy is the API from TF 2.4 on (and Keras 3); 2.1-2.3 had it experimental.
    mixed = tf.keras.mixed_precision
    if hasattr(mixed, "set_global_policy"):
        mixed.set_global_policy(policy)
    else:
        mixed.experimental.set_policy(policy)


def tf_global_policy(tf: ModuleType) -> Any:
    mixed = tf.keras.mixed_precision
    if hasattr(mixed, "global_policy"):
        return mixed.global_policy()
    return mixed.experimental.global_policy()


def _tf_variable_device(variable: Any) -> str:
    # Keras 2 variables carry .device; Keras 3 wraps a tf.Variable in .value.
    device = getattr(variable, "device", None)
    if not device and hasattr(variable, "value"):
        device = getattr(variable.value, "device", None)
    return str(device or "")


def train_tensorflow(tf: ModuleType, device: str, steps: int) -> list[float]:
    """A mixed_float16 Keras fit of a small conv model on one GPU; raises when a weight is off the GPU.

    The optimizer is the one users get from tf.keras.optimizers (from TF 2.11 on it compiles its update step with
    XLA on the GPU, which needs libdevice), compiled and fitted as users do, so what breaks their training breaks
    this step too."""
    prior = tf_global_policy(tf)
    tf_set_policy(tf, "mixed_float16")
    try:
        tf.random.set_seed(TRAIN_SEED)
        with tf.device(device):
            x = tf.random.normal((TRAIN_SAMPLES, TRAIN_IMAGE, TRAIN_IMAGE, TRAIN_CHANNELS), seed=1)
            teacher = tf.random.normal((TRAIN_CHANNELS, TRAIN_CLASSES), seed=2)
            y = tf.argmax(tf.matmul(tf.reduce_mean(x, axis=[1, 2]), teacher), axis=1)
            layers = tf.keras.layers
            model = tf.keras.Sequential(
                [
                    tf.keras.Input(shape=(TRAIN_IMAGE, TRAIN_IMAGE, TRAIN_CHANNELS)),
                    layers.Conv2D(TRAIN_WIDTH, 3, padding="same", use_bias=False),
                    layers.BatchNormalization(),
                    layers.ReLU(),
                    layers.Conv2D(2 * TRAIN_WIDTH, 3, strides=2, padding="same", activation="relu"),
                    layers.GlobalAveragePooling2D(),
                    layers.Dense(TRAIN_CLASSES),
                    # Softmax-side outputs stay float32, as the mixed-precision guide asks.
                    layers.Activation("linear", dtype="float32"),
                ]
            )
            model.compile(
                optimizer=tf.keras.optimizers.Adam(TRAIN_LR),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            history = model.fit(x, y, batch_size=TRAIN_SAMPLES, epochs=steps, verbose=0, shuffle=False)
        compute_dtype = str(getattr(model.layers[0], "compute_dtype", ""))
        if "float16" not in compute_dtype:
            raise RuntimeError("mixed_float16 did not engage: compute dtype {}".format(compute_dtype or "unknown"))
        off = [v.name for v in model.weights if "GPU" not in _tf_variable_device(v).upper()]
        if off:
            raise RuntimeError("weights not on the GPU (CPU fallback): {}".format(", ".join(off)))
        return [float(v) for v in history.history["loss"]]
    finally:
        tf_set_policy(tf, prior)


def probe_tensorflow(tf: ModuleType, exp: Expectations, options: RunOptions, driver: str | None) -> Probe:
    info: dict[str, Any] = {}
    if hasattr(tf, "sysconfig") and hasattr(tf.sysconfig, "get_build_info"):
        info = dict(tf.sysconfig.get_build_info())
    cuda = info.get("cuda_version")
    cudnn_raw = info.get("cudnn_version")
    # TF's build info often holds only the cuDNN major ("8"): compare no deeper than it gives.
    cudnn_parts = dl_stack.decode_cudnn_version(cudnn_raw, pad=False)
    cudnn_text = str(cudnn_raw) if cudnn_raw else None
    versions = probe_versions(tf.__version__, str(cuda) if cuda else None, cudnn_text, driver)
    depth = min(2, len(cudnn_parts)) if cudnn_parts else 2
    checks = [
        *version_checks("tensorflow", versions, exp),
        compare_check("cudnn_version", "cuDNN", cudnn_parts, versions["cudnn"], exp.cudnn, depth),
    ]
    config = tf.config
    lister = getattr(config, "list_physical_devices", None) or config.experimental.list_physical_devices
    with _NativeStderr() as native:
        gpus = lister("GPU")
    if native.text:
        sys.stderr.write(native.text)
    if not gpus:
        # TF registers no GPU when it cannot dlopen cuDNN ("Cannot dlopen some GPU libraries"): that is the cause.
        problem = classify_cudnn_error(native.text)
        if problem is not None:
            return Probe([*checks, Check(CUDNN_LOAD, FAIL, describe_cudnn_problem(problem))], [], versions, True)
        built = bool(tf.test.is_built_with_cuda())
        check, visible = unavailable_check("cuda_available", native.text, built, versions["cuda"], exp, driver)
        return Probe([*checks, check], [], versions, visible)
    checks.append(Check("cuda_available", PASS, f"{len(gpus)} GPU(s) visible"))
    arch_list = info.get("cuda_compute_capabilities")
    arch_list = [str(a) for a in arch_list] if arch_list else None
    checks.append(arch_list_check(arch_list, exp.cuda_arch_list))

    details_of = getattr(config.experimental, "get_device_details", None)
    gpu_rows = []
    capabilities: list[tuple[int, int] | None] = []
    for index, gpu in enumerate(gpus):
        details = dict(details_of(gpu)) if details_of else {}
        raw = details.get("compute_capability")
        capabilities.append(None if raw is None else (int(raw[0]), int(raw[1])))
        gpu_rows.append(
            {
                "index": index,
                "name": details.get("device_name", gpu.name),
                "capability": "{}.{}".format(*raw) if raw else None,
            }
        )
        unknown = "capability or build arch list unknown; not checked"
        checks.append(gpu_arch_check(index, gpu_rows[-1]["name"], capabilities[-1], arch_list, unknown))

    if len(gpus) > 1:
        checks.append(
            Check(
                "multi_gpu",
                SKIP,
                f"{len(gpus)} GPUs visible; not checked for TensorFlow: dl-smoke's NCCL all-reduce and DDP checks "
                "are PyTorch only (TensorFlow's MirroredStrategy is not exercised)",
            )
        )
    # One GPU is enough for TF: Keras places the fit on one device anyway.
    name = "train_mixed_float16[0]"
    try:
        with _NativeStderr() as native:
            losses = train_tensorflow(tf, "/GPU:0", options.steps)
    except Exception as error:  # TF raises many types (InternalError, NotFoundError, ...)
        sys.stderr.write(native.text)
        detail = describe_cuda_failure(
            str(error),
            capability=capabilities[0],
            arch_list=arch_list,
            cuda=versions["cuda"],
            exp=exp,
            driver=driver,
            log=native.text,
        )
        checks.append(Check(name, FAIL, detail))
        # The conv fit is where TF first touches cuDNN: a cuDNN cause gets its own check.
        problem = classify_cudnn_error(f"{error}\n{native.text}")
        if problem is not None:
            checks.append(Check(CUDNN_LOAD, FAIL, describe_cudnn_problem(problem)))
        return Probe(checks, gpu_rows, versions, True)
    checks.append(loss_check(name, losses, "conv + batch norm, Keras Adam"))
    loaded = "cuDNN {} loaded: the conv model's fit ran".format(cudnn_text or "(version unknown)")
    checks.append(Check(CUDNN_LOAD, PASS, loaded))
    return Probe(checks, gpu_rows, versions, True)


# What each framework of dl_stack.FRAMEWORKS is probed with.
PROBES: dict[str, Callable[[ModuleType, Expectations, RunOptions, str | None], Probe]] = {
    "pytorch": probe_torch,
    "tensorflow": probe_tensorflow,
}


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def whole_number(text: str) -> int:
    """argparse type for --steps: ASCII digits only (int() also takes other scripts' digits, '1_000', spaces)."""
    if not _DIGITS.fullmatch(text) or len(text) > 24:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dl-smoke",
        description="GPU smoke test: versions, arch coverage, cuDNN, and a short mixed-precision training step of a "
        "small conv model on every GPU; with several GPUs (PyTorch) also an NCCL all-reduce and a DDP step across all "
        "of them. Exit 0 passed, 1 failed, 2 usage error, 77 no GPU.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--framework",
        choices=("auto", *dl_stack.FRAMEWORKS),
        default="auto",
        help="framework to test (default: the cell's, else whichever imports, PyTorch first)",
    )
    parser.add_argument(
        "--steps", type=whole_number, default=20, help=f"training steps (default 20, at least 6, at most {MAX_STEPS})"
    )
    parser.add_argument(
        "--channels-last", action="store_true", help="train the conv model in channels_last (NHWC) layout (PyTorch)"
    )
    parser.add_argument(
        "--no-multi-gpu",
        action="store_true",
        help="with several GPUs, test each alone: no NCCL all-reduce or DDP step across them",
    )
    parser.add_argument("--expect-cuda", metavar="X.Y", help="CUDA version the build must have")
    parser.add_argument("--expect-cudnn", metavar="VER", help="cuDNN version, compared by major.minor")
    parser.add_argument(
        "--expect-framework-version", metavar="V", help="framework version (prefix match: 2.11 matches 2.11.0+cu130)"
    )
    parser.add_argument(
        "--cell-file",
        metavar="PATH",
        help=f"JSON cell file with expectations (default {DEFAULT_CELL_FILE} if it exists)",
    )
    return parser


def load_cell(path: str | None) -> dict[str, Any]:
    """An explicit path must exist; the default path is optional."""
    if path is None:
        if not os.path.exists(DEFAULT_CELL_FILE):
            return {}
        path = DEFAULT_CELL_FILE
    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as error:
        raise dl_stack.UsageError(f"cannot read cell file {path}: {error.strerror}") from None
    except ValueError as error:
        raise dl_stack.UsageError(f"cell file {path} is not valid JSON: {error}") from None
    return validate_cell(data, path)


def import_framework(name: str) -> tuple[ModuleType | None, str]:
    """(module, "") or (None, why it did not import)."""
    if name == "tensorflow":
        # TF's C++ start-up chatter would bury the summary; errors still get through.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        module = __import__(dl_stack.FRAMEWORKS[name].modules[0])
    except Exception as error:  # a broken install raises OSError etc., not only ImportError
        return None, f"{type(error).__name__}: {dl_stack.first_line(str(error))}"
    return module, ""


def check_flags(args: argparse.Namespace) -> None:
    """Usage errors are exit 2 before anything runs: never a failed check (1) or, without a GPU, a skip (77)."""
    if args.steps < 6:
        raise dl_stack.UsageError("--steps must be at least 6 (the loss check compares 3 vs 3 steps)")
    if args.steps > MAX_STEPS:
        shown = str(args.steps) if len(str(args.steps)) <= 24 else str(args.steps)[:21] + "..."
        raise dl_stack.UsageError(f"--steps must be at most {MAX_STEPS}, got {shown}")
    for flag, value in (
        ("--expect-cuda", args.expect_cuda),
        ("--expect-cudnn", args.expect_cudnn),
        ("--expect-framework-version", args.expect_framework_version),
    ):
        if value is not None and not (
            value.isascii()
            and value.isprintable()
            and value[:1].isdigit()
            and " " not in value
            and dl_stack.parse_version(value)
        ):
            raise dl_stack.UsageError(f"{flag} {value!r} is not a version (e.g. 12.1 or 2.1.2)")


def import_failure_report(name: str, why: str, exp: Expectations) -> dict[str, Any] | None:
    """The report for a framework that would not import because cuDNN could not be loaded; None for other causes.

    torch's libtorch_cuda.so needs libcudnn.so.N, so a missing cuDNN stops the import itself: a broken image
    (exit 1) that says so, not a usage error."""
    problem = classify_cudnn_error(why)
    if problem is None or problem.kind != CUDNN_LOAD:
        return None
    driver = dl_stack.read_driver_version()
    versions = probe_versions(None, None, None, driver)
    detail = f"{describe_cudnn_problem(problem)} (importing {dl_stack.FRAMEWORKS[name].modules[0]} failed)"
    checks = [*common_checks(exp, driver), Check(CUDNN_LOAD, FAIL, detail)]
    return build_report(name, Probe(checks, [], versions, host_has_gpu()), checks)


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_flags(args)
    exp = resolve_expectations(load_cell(args.cell_file), args)
    options = RunOptions(args.steps, args.channels_last, not args.no_multi_gpu)
    candidates = choose_framework(args.framework, exp.framework)
    failures = []
    for name in candidates:
        module, why = import_framework(name)
        if module is None:
            report = import_failure_report(name, why, exp)
            if report is not None:
                return report
            failures.append(f"{name} ({why})")
            continue
        driver = dl_stack.read_driver_version()
        probe = PROBES[name](module, exp, options, driver)
        checks = common_checks(exp, driver) + probe.checks
        if exp.framework is not None and exp.framework != name:
            checks.append(Check("framework", FAIL, f"cell expects {exp.framework}, testing {name}"))
        return build_report(name, probe, checks)
    raise dl_stack.UsageError("cannot import {}".format("; ".join(failures)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except dl_stack.UsageError as error:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"dl-smoke: error: {error}\n")
        return dl_stack.EXIT_USAGE
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        print(render_human(report))
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
