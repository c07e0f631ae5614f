"""Facts and rules about the deep-learning GPU stack that dl-smoke, dl-bench and the dlimages package share:
the framework table, exit codes, version reading (cuDNN's and NCCL's encodings, the driver), CUDA's arch rule,
and torch's AMP calls across its versions. How both commands start one worker process per GPU is dl_workers.py.

It travels into every image beside dl-smoke and dl-bench, so like them it is standalone (stdlib only) and stays
compatible with Python 3.8, the oldest Python in the matrix. The package imports it as `dlimages.payload.dl_stack`;
the scripts import it as their sibling `dl_stack` when they run as plain files.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# 77 is the automake/ctest convention for "skipped"; a run without a GPU must never look green.
EXIT_SKIPPED = 77


class UsageError(Exception):
    """Bad input from the person running a script: exit 2 with the message."""


class FrameworkFacts(NamedTuple):
    """How one framework is named everywhere: matrix.yaml, flags, tags, titles and the modules it brings."""

    name: str  # the key in matrix.yaml and cell.json: "pytorch"
    title: str  # how people write it: "PyTorch"
    flag: str  # the command-line flag and the tag's short name: --torch, torch2.1.2
    modules: tuple[str, ...]  # what an image of it imports: the framework first, then its companions


# The one table of frameworks; everything else (validation, tags, titles, dl-smoke, the image tests) reads it.
FRAMEWORKS = {
    facts.name: facts
    for facts in (
        FrameworkFacts("pytorch", "PyTorch", "torch", ("torch", "torchvision", "torchaudio")),
        FrameworkFacts("tensorflow", "TensorFlow", "tf", ("tensorflow",)),
    )
}


# --- versions ------------------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """Leading dotted numbers of a version string: "2.11.0+cu130" -> (2, 11, 0); None if there are none."""
    if text is None:
        return None
    match = _VERSION_RE.match(str(text))
    if match is None:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def decode_nccl_version(value: Any) -> tuple[int, ...] | None:
    """NCCL's version as torch reports it: a tuple (2, 28, 9) from torch 1.12 on, before that NCCL_VERSION_CODE,
    which has cuDNN's two encodings (2708 -> 2.7.8; 21803 -> 2.18.3 from NCCL 2.9 on)."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return tuple(int(part) for part in value)
    return decode_cudnn_version(value)


def format_version(parts: Sequence[int] | None) -> str:
    return "unknown" if parts is None else ".".join(str(p) for p in parts)


def python_version() -> str:
    """The running Python as major.minor.micro."""
    return "{}.{}.{}".format(*sys.version_info[:3])


def decode_cudnn_version(value: int | str | None, *, pad: bool = True) -> tuple[int, ...] | None:
    """cuDNN's version as (major, minor, patch), from its integer encoding or a dotted string.

    cuDNN up to 8 encodes major*1000 + minor*100 + patch (8005 -> 8.0.5, 8902 -> 8.9.2); cuDNN 9 switched to
    major*10000 + minor*100 + patch (90100 -> 9.1.0), so any value of 10000 or more uses the new encoding (the
    old one never reached a major of 10). A dotted string ("8.9.2", or TF's bare major "8") is read as written
    and padded with zeros; pad=False keeps only the parts it gives, so a check compares no deeper than that.
    """
    if value is None:
        return None
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1000:
        number = int(text)
        major, rest = divmod(number, 10000 if number >= 10000 else 1000)
        return (major, rest // 100, rest % 100)
    parts = parse_version(text)
    if parts is None or not pad:
        return parts
    return (*parts, 0, 0)[:3]


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of an error text, cut to `limit` characters."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    line = lines[0] if lines else str(text)
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the CUDA architecture rule --------------------------------------------------------------------------------

_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


class ArchEntry(NamedTuple):
    """One entry of a build's CUDA arch list: sm_XY is a cubin, compute_XY is PTX."""

    kind: str  # "sm" or "compute"
    major: int
    minor: int
    variant: str  # "" portable, "a" arch-specific, "f" family-specific
    text: str


def parse_arch(entry: str) -> ArchEntry | None:
    """Parse "sm_90", "sm_100a", "compute_80" (the last digit is the minor); None if not an arch."""
    match = _ARCH_RE.match(entry.strip().lower())
    if match is None:
        return None
    kind, major, minor, variant = match.groups()
    return ArchEntry(kind, int(major), int(minor), variant, entry.strip())


def arch_name(capability: Sequence[int]) -> str:
    """A GPU's compute capability as CUDA names its cubins: (9, 0) -> "sm_90"."""
    return f"sm_{capability[0]}{capability[1]}"


def entry_runs_on(entry: ArchEntry, capability: tuple[int, int]) -> bool:
    """CUDA's binary-compatibility rule for one arch-list entry on a GPU of `capability`.

    A cubin sm_XY runs on the same major X with minor >= Y; PTX compute_XY is JIT-compiled by
    the driver for any GPU at least XY. Arch-specific "a" targets (sm_90a) run only on exactly
    that GPU; family-specific "f" targets (sm_100f) on the same major with minor >= Y.
    """
    major, minor = capability
    if entry.variant == "a":
        return (entry.major, entry.minor) == (major, minor)
    if entry.variant == "f" or entry.kind == "sm":
        return entry.major == major and entry.minor <= minor
    return (entry.major, entry.minor) <= (major, minor)


def kernel_for_capability(capability: tuple[int, int], arch_list: Sequence[str]) -> str | None:
    """The arch-list entry a GPU would run from, preferring a cubin over JIT from PTX; None if none runs.

    Example: kernel_for_capability((9, 0), ["sm_80", "compute_80"]) == "compute_80".
    """
    entries = [e for e in (parse_arch(a) for a in arch_list) if e is not None]
    runnable = [e for e in entries if entry_runs_on(e, capability)]
    cubins = [e for e in runnable if e.kind == "sm"]
    # The newest matching cubin is the one the loader picks; PTX is the fallback.
    for group in (cubins, runnable):
        if group:
            return max(group, key=lambda e: (e.major, e.minor)).text
    return None


# --- this host and torch ----------------------------------------------------------------------------------------


def read_driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, else pynvml, else None."""
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0 and lines:
            return lines[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml absent or no driver: the driver is simply unknown
        return None


def torch_autocast(torch: ModuleType, dtype_name: str | None) -> Any:
    """Autocast on CUDA to `dtype_name` ("float16", "bfloat16"), or nothing for None.

    torch.autocast is 1.10+; before it torch.cuda.amp.autocast knows fp16 only.
    """
    if dtype_name is None:
        return contextlib.nullcontext()
    dtype = getattr(torch, dtype_name)
    if hasattr(torch, "autocast"):
        return torch.autocast(device_type="cuda", dtype=dtype)
    if dtype is torch.float16:
        return torch.cuda.amp.autocast()
    raise RuntimeError("this torch has no torch.autocast, so no bf16 autocast")


def torch_grad_scaler(torch: ModuleType) -> Any:
    # torch.amp.GradScaler arrived in 2.3 and torch.cuda.amp.GradScaler is deprecated since.
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def torch_backward_step(loss: Any, optimizer: Any, scaler: Any) -> None:
    """Backpropagate `loss` and step `optimizer`, through the GradScaler when fp16 needs one (None: plainly)."""
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
