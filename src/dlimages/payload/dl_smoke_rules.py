"""dl-smoke's rules that need no framework: the checks' vocabulary and what the cell expects, versions, the build's
arch list, the loss, the driver, whether a GPU is there at all, and the run's outcome. A part of dl-smoke.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import glob
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_smoke_errors as errors
    from . import dl_stack
else:
    import dl_smoke_errors as errors
    import dl_stack


PASS = "pass"  # noqa: S105 (a check status, not a password)
FAIL = "fail"
SKIP = "skip"
INFO = "info"

# The training step: a small convolutional model, so the step runs cuDNN convolutions (forward and backward) and
# batch norm; small enough to take well under a second, big enough that the loss has somewhere to go.
TRAIN_SAMPLES = 128
TRAIN_IMAGE = 16  # height and width of the synthetic images
TRAIN_CHANNELS = 3
TRAIN_WIDTH = 32  # channels of the first convolution; the second has twice as many
TRAIN_CLASSES = 8
TRAIN_LR = 1e-2
TRAIN_SEED = 0


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
# Pure rules: versions, arch compatibility, the loss, the outcome.
# ---------------------------------------------------------------------------------------------


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
    kind = errors.classify_cuda_error(both)
    if kind == errors.DRIVER_TOO_OLD:
        return errors.describe_driver_too_old(cuda, exp.min_driver, driver)
    if kind == errors.NO_KERNEL and capability is not None:
        return errors.describe_no_kernel(capability, arch_list or [])
    cudnn = errors.classify_cudnn_error(both)
    if cudnn is not None:
        return errors.describe_cudnn_problem(cudnn)
    missing = errors.classify_xla_error(both)
    if missing is not None:
        return errors.describe_xla_problem(missing, both)
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
        return Check(name, FAIL, errors.describe_no_kernel(capability, arch_list))
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
    return Check("driver", FAIL, errors.describe_driver_too_old(exp.cuda, exp.compat_driver or exp.min_driver, driver))


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
    kind = errors.classify_cuda_error(reason)
    if kind == errors.DRIVER_TOO_OLD:
        return Check(name, FAIL, errors.describe_driver_too_old(cuda or exp.cuda, exp.min_driver, driver)), True
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
