"""What the error texts of CUDA, cuDNN, XLA and the frameworks say (no kernel for the GPU, a driver too old, a
cuDNN that could not be loaded or failed, XLA without CUDA's compiler files), and dl-smoke's words for each cause.
Pure text rules, a part of dl-smoke (dl_smoke.py): standalone and Python 3.8 like it.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_stack
else:
    import dl_stack


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


def describe_no_kernel(capability: tuple[int, int], arch_list: Sequence[str]) -> str:
    return "no kernel image for {} in this build (build has: {})".format(
        dl_stack.arch_name(capability), " ".join(arch_list) if arch_list else "nothing listed"
    )


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
