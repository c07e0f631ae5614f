#!/usr/bin/env python3
"""GPU smoke test run inside a dlimages image (installed as `dl-smoke`): prove that the
framework sees the GPU, was built with kernels for it, matches the cell's versions, and can
train a few mixed-precision steps on it.

Standalone on purpose (stdlib, the framework and dl_stack.py beside it): it is copied into
images and also runs as a plain script on any host, so it must not import dlimages. It stays
compatible with Python 3.8, the oldest Python in the matrix.

Exit codes: 0 passed on a GPU, 1 a check failed, 2 usage error, 77 skipped (no GPU visible).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import functools
import glob
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
NO_KERNEL = "no_kernel_image"
DRIVER_TOO_OLD = "driver_too_old"

# The training step: small enough to take well under a second, big enough that the loss has
# somewhere to go.
TRAIN_SAMPLES = 256
TRAIN_FEATURES = 64
TRAIN_HIDDEN = 256
TRAIN_CLASSES = 8
TRAIN_LR = 1e-2
TRAIN_SEED = 0
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
    """A failed training step in the checks' words: no kernel, driver too old, else the error's first line.

    `log` is what native code wrote to stderr (TF logs CUDA errors there): it helps classify, it is not shown.
    """
    kind = classify_cuda_error(f"{text} {log}")
    if kind == DRIVER_TOO_OLD:
        return describe_driver_too_old(cuda, exp.min_driver, driver)
    if kind == NO_KERNEL and capability is not None:
        return describe_no_kernel(capability, arch_list or [])
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


def loss_check(name: str, losses: Sequence[float]) -> Check:
    if loss_decreased(losses):
        return Check(name, PASS, describe_losses(losses))
    return Check(name, FAIL, "loss did not decrease: " + describe_losses(losses))


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
        if key == "cuda_arch_list":
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
    lines = ["dl-smoke: {} {}".format(report["framework"], versions.get("framework") or "")]
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
        ok = driver_is_sufficient(driver, exp.min_driver)
        checks.append(
            Check(
                "driver",
                PASS if ok else FAIL,
                f"{driver} (needs >= {exp.min_driver})"
                if ok
                else describe_driver_too_old(exp.cuda, exp.min_driver, driver),
            )
        )
    return checks


def probe_versions(framework: str, cuda: str | None, cudnn: str | None, driver: str | None) -> dict[str, str | None]:
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


def train_torch(torch: ModuleType, device_index: int, dtype_name: str, steps: int) -> list[float]:
    """A real AMP training loop on one GPU; raises on any tensor off the GPU or autocast unused."""
    device = torch.device("cuda", device_index)
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(TRAIN_SEED)
    x = torch.randn(TRAIN_SAMPLES, TRAIN_FEATURES, device=device)
    teacher = torch.randn(TRAIN_FEATURES, TRAIN_CLASSES, device=device)
    y = (x @ teacher).argmax(dim=1)  # learnable labels, so the loss has somewhere to go
    model = torch.nn.Sequential(
        torch.nn.Linear(TRAIN_FEATURES, TRAIN_HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(TRAIN_HIDDEN, TRAIN_CLASSES),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=TRAIN_LR)
    # bf16 has fp32's range, so only fp16 needs loss scaling.
    scaler = dl_stack.torch_grad_scaler(torch) if dtype is torch.float16 else None
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with dl_stack.torch_autocast(torch, dtype_name):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
        if logits.dtype != dtype:
            raise RuntimeError(f"autocast did not engage: logits are {logits.dtype}, expected {dtype}")
        dl_stack.torch_backward_step(loss, optimizer, scaler)
        losses.append(float(loss.item()))
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
    return losses


def torch_train_check(
    torch: ModuleType, index: int, dtype_name: str, steps: int, describe_error: Callable[[str], str]
) -> Check:
    name = "train_{}[{}]".format("amp_fp16" if dtype_name == "float16" else "amp_bf16", index)
    try:
        losses = train_torch(torch, index, dtype_name, steps)
    except RuntimeError as error:
        return Check(name, FAIL, describe_error(str(error)))
    return loss_check(name, losses)


def probe_torch(torch: ModuleType, exp: Expectations, steps: int, driver: str | None) -> Probe:
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

    cudnn_parts = None
    if torch.backends.cudnn.is_available():
        cudnn_parts = dl_stack.decode_cudnn_version(torch.backends.cudnn.version())
        versions["cudnn"] = dl_stack.format_version(cudnn_parts)
    checks.append(compare_check("cudnn_version", "cuDNN", cudnn_parts, versions["cudnn"], exp.cudnn, 2))

    gpus = []
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
        if arch.status == FAIL:
            continue  # training would only repeat the failure in a less readable form
        describe_error = functools.partial(
            describe_cuda_failure, capability=(major, minor), arch_list=arch_list, cuda=cuda, exp=exp, driver=driver
        )
        checks.append(torch_train_check(torch, index, "float16", steps, describe_error))
        bf16 = getattr(torch.cuda, "is_bf16_supported", None)
        if bf16 is not None and hasattr(torch, "autocast") and bf16():
            checks.append(torch_train_check(torch, index, "bfloat16", steps, describe_error))
        else:
            checks.append(Check(f"train_amp_bf16[{index}]", SKIP, "bf16 not supported by this GPU or torch"))
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
    """A mixed_float16 Keras fit on one GPU; raises when a weight is off the GPU."""
    prior = tf_global_policy(tf)
    tf_set_policy(tf, "mixed_float16")
    try:
        tf.random.set_seed(TRAIN_SEED)
        with tf.device(device):
            x = tf.random.normal((TRAIN_SAMPLES, TRAIN_FEATURES), seed=1)
            teacher = tf.random.normal((TRAIN_FEATURES, TRAIN_CLASSES), seed=2)
            y = tf.argmax(tf.matmul(x, teacher), axis=1)
            layers = tf.keras.layers
            model = tf.keras.Sequential(
                [
                    tf.keras.Input(shape=(TRAIN_FEATURES,)),
                    layers.Dense(TRAIN_HIDDEN, activation="relu"),
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


def probe_tensorflow(tf: ModuleType, exp: Expectations, steps: int, driver: str | None) -> Probe:
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

    # One GPU is enough for TF: Keras places the fit on one device anyway.
    name = "train_mixed_float16[0]"
    try:
        with _NativeStderr() as native:
            losses = train_tensorflow(tf, "/GPU:0", steps)
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
        return Probe(checks, gpu_rows, versions, True)
    checks.append(loss_check(name, losses))
    return Probe(checks, gpu_rows, versions, True)


# What each framework of dl_stack.FRAMEWORKS is probed with.
PROBES: dict[str, Callable[[ModuleType, Expectations, int, str | None], Probe]] = {
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
        description="GPU smoke test: versions, arch coverage and a short mixed-precision "
        "training step. Exit 0 passed, 1 failed, 2 usage error, 77 no GPU.",
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_flags(args)
    exp = resolve_expectations(load_cell(args.cell_file), args)
    candidates = choose_framework(args.framework, exp.framework)
    failures = []
    for name in candidates:
        module, why = import_framework(name)
        if module is None:
            failures.append(f"{name} ({why})")
            continue
        driver = dl_stack.read_driver_version()
        probe = PROBES[name](module, exp, args.steps, driver)
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
