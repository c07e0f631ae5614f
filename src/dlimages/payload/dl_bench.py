#!/usr/bin/env python3
"""Training benchmark run inside a dlimages image (installed as `dl-bench`): synthetic ResNet-50
throughput (images/s) and peak GPU memory per precision mode, to prove an image is not only
correct but configured to be fast (TF32, AMP, channels_last, torch.compile). With `--gpus all`:
NCCL all-reduce bus bandwidth by message size, and DDP ResNet-50 throughput on all GPUs against
one GPU in the same run (scaling efficiency), one process per GPU.

Standalone on purpose (stdlib, torch, torchvision optional, and dl_stack.py beside it): it is
copied into images and also runs as a plain script on any host, so it must not import dlimages.
It stays compatible with Python 3.8, the oldest Python in the matrix, and with torch 1.7 onwards
(newer APIs are looked up with hasattr).

Exit codes: 0 every mode ran (or was skipped as unsupported), 1 a mode failed, 2 usage error,
77 skipped (no GPU visible).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

# dl_stack.py lies beside this file, in images (/usr/local/bin) as in the source tree. Run as a plain
# script there is no package and the script's own folder comes first on sys.path; imported as
# dlimages.payload.dl_bench (and by mypy) it is the package's sibling module.
if TYPE_CHECKING or __package__:
    from . import dl_stack
else:
    import dl_stack

IMAGE_SIZE = 224
NUM_CLASSES = 1000
# Plain SGD settings of the reference ResNet-50 recipes; a small lr keeps fp32 on random
# labels finite for the few dozen steps a benchmark takes.
LR = 0.01
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
GIB = float(2**30)


class Mode(NamedTuple):
    """One precision/layout configuration of the training step."""

    name: str
    autocast: str | None  # torch dtype name under autocast, None for full precision
    tf32: bool  # TF32 for matmul and cuDNN convolutions
    channels_last: bool
    compile: bool
    summary: str


MODES = {
    m.name: m
    for m in (
        Mode("fp32", None, False, False, False, "FP32, TF32 off for matmul and cuDNN"),
        Mode("tf32", None, True, False, False, "FP32 storage, TF32 math"),
        Mode("amp_fp16", "float16", True, False, False, "AMP fp16 + GradScaler"),
        Mode("amp_fp16_cl", "float16", True, True, False, "AMP fp16 + channels_last"),
        Mode("bf16_cl", "bfloat16", True, True, False, "AMP bf16 + channels_last"),
        Mode("compile", "bfloat16", True, True, True, "AMP bf16 + channels_last + torch.compile"),
    )
}
DEFAULT_MODES = ("fp32", "tf32", "amp_fp16", "amp_fp16_cl", "bf16_cl")
DEFAULT_BATCH_SIZE = 128
# Upper bounds on the numbers a person types: far above any real run (a batch of 65536 images needs terabytes),
# low enough that a typo, or 10**30, is a usage error at once instead of an hour-long run or an overflow.
MAX_BATCH_SIZE = 65536
MAX_STEPS = 100000
_DIGITS = re.compile("[0-9]+")

# --gpus all: all-reduce message sizes (float32) and counts as nccl-tests runs them (-w 5 -n 20, here more of
# each for steadier figures); the DDP mode and per-GPU batch of the published H200 figures.
ALLREDUCE_SIZES = (16 * 2**20, 128 * 2**20, 2**30)
ALLREDUCE_WARMUP = 10
ALLREDUCE_ITERS = 50
DDP_MODE = "bf16_cl"
DDP_BATCH_SIZE = 256
MAX_GPUS = 1024
# A safety net for a hung collective, not a budget: cuDNN autotuning and torch.compile take minutes on slow GPUs.
WORKER_TIMEOUT_S = 1800


# ---------------------------------------------------------------------------------------------
# Pure rules: flags to a plan, results to a report.
# ---------------------------------------------------------------------------------------------


def parse_modes(text: str | None, with_compile: bool) -> list[str]:
    """Modes in the order given (default: all but compile); --compile appends compile."""
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(DEFAULT_MODES)
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise dl_stack.UsageError(f"unknown mode(s) {', '.join(unknown)} (known: {', '.join(MODES)})")
    if with_compile and "compile" not in names:
        names.append("compile")
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen


def _positive_int(text: str, what: str, most: int = MAX_BATCH_SIZE) -> int:
    # ASCII digits only: int() also takes other scripts' digits ('\u0661\u0662\u0668'), '1_000' and spaces.
    value = int(text) if _DIGITS.fullmatch(text) and len(text) <= 24 else 0
    if not 1 <= value <= most:
        raise dl_stack.UsageError(f"{what} must be a positive integer up to {most}, got {text[:40]!r}")
    return value


def whole_number(text: str) -> int:
    """argparse type for --warmup and --iters: ASCII digits (bounds are checked with the other flags)."""
    if not _DIGITS.fullmatch(text) or len(text) > 24:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    return int(text)


def check_steps(warmup: int, iters: int) -> None:
    for flag, value in (("--warmup", warmup), ("--iters", iters)):
        if not 1 <= value <= MAX_STEPS:
            shown = str(value) if len(str(value)) <= 24 else str(value)[:21] + "..."
            raise dl_stack.UsageError(f"{flag} must be from 1 to {MAX_STEPS}, got {shown}")


def check_writable(path: str) -> None:
    """Refuse an --out the report could not be written to, before the benchmark runs rather than after it."""
    existed = os.path.lexists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as error:
        raise dl_stack.UsageError(f"--out {path}: cannot write there ({error.strerror or error})") from None
    except ValueError as error:  # a NUL in the name
        raise dl_stack.UsageError(f"--out {path!r}: {error}") from None
    if not existed:
        os.remove(path)


def parse_batch_sizes(
    values: Sequence[str] | None, modes: Sequence[str], default: int = DEFAULT_BATCH_SIZE
) -> dict[str, int]:
    """Batch size per mode from repeated --batch-size N (all modes) or MODE=N (one mode)."""
    overrides: dict[str, int] = {}
    for value in values or ():
        if "=" in value:
            name, _, size = value.partition("=")
            name = name.strip()
            if name not in MODES:
                raise dl_stack.UsageError(f"--batch-size {value}: unknown mode {name!r} (known: {', '.join(MODES)})")
            overrides[name] = _positive_int(size, f"--batch-size {name}")
        else:
            default = _positive_int(value, "--batch-size")
    return {name: overrides.get(name, default) for name in modes}


def images_per_second(batch_size: int, iters: int, seconds: float) -> float:
    return batch_size * iters / seconds if seconds > 0 else 0.0


def parse_gpus(text: str) -> int | None:
    """--gpus: a count of GPUs (1, the default, is the per-mode benchmark) or "all" (None: every visible GPU)."""
    if text.strip().lower() == "all":
        return None
    return _positive_int(text, "--gpus", MAX_GPUS)


def multi_gpu_mode(modes_text: str | None, with_compile: bool) -> str:
    """The one mode DDP runs in with --gpus: --modes names it (default bf16_cl, or compile with --compile)."""
    default = "compile" if with_compile else DDP_MODE
    names = parse_modes(modes_text or default, False)
    if with_compile and "compile" not in names:
        names.append("compile")
    if len(names) != 1:
        raise dl_stack.UsageError(f"--gpus runs DDP in one mode; got {', '.join(names)} (give one with --modes)")
    return names[0]


def bus_bandwidth(size_bytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) of one all-reduce in GB/s (10**9 B/s), as nccl-tests defines them:
    algbw = size / time; busbw = algbw * 2 * (n - 1) / n, the traffic each GPU's link carries in a ring, so that
    busbw compares with the link's peak whatever the number of GPUs.

    Example: bus_bandwidth(2**30, 0.0033, 2) == (325.4, 325.4) to one decimal."""
    if seconds <= 0 or world < 1:
        return 0.0, 0.0
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def scaling_efficiency(all_gpus: float, one_gpu: float, world: int) -> float | None:
    """Throughput on `world` GPUs over `world` times the throughput on one: 1.0 is perfect scaling."""
    if one_gpu <= 0 or world < 1:
        return None
    return all_gpus / (world * one_gpu)


def add_memory_savings(results: list[dict[str, Any]]) -> None:
    """Mark each AMP mode with fp32's peak memory over its own (2.0 = half the memory).

    The per-image figure divides by batch size first, so a mode run at a bigger batch is
    still compared fairly; the plain ratio is what the two runs really took.
    """
    fp32 = next((r for r in results if r["mode"] == "fp32" and r["status"] == "ok"), None)
    for result in results:
        result["mem_saving_vs_fp32"] = None
        result["mem_saving_vs_fp32_per_image"] = None
        if fp32 is None or result["status"] != "ok" or not MODES[result["mode"]].autocast:
            continue
        if not result["peak_mem_gib"]:
            continue
        ratio = fp32["peak_mem_gib"] / result["peak_mem_gib"]
        per_image = ratio * result["batch_size"] / fp32["batch_size"]
        result["mem_saving_vs_fp32"] = round(ratio, 2)
        result["mem_saving_vs_fp32_per_image"] = round(per_image, 2)


def decide_outcome(results: Sequence[dict[str, Any]]) -> tuple[str, int]:
    """A mode that errored fails the run; a mode skipped as unsupported does not."""
    if any(r["status"] not in ("ok", "skipped") for r in results):
        return "failed", dl_stack.EXIT_FAILED
    return "passed", dl_stack.EXIT_PASSED


def render_table(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "dl-bench: ResNet-50 ({}) training, synthetic {}x{} data, {} warmup + {} timed steps".format(
            env["model"], IMAGE_SIZE, IMAGE_SIZE, report["warmup"], report["iters"]
        ),
        "GPU {} (sm {}), driver {}, torch {}, CUDA {}, cuDNN {}".format(
            env["gpu"], env["capability"], env["driver"], env["torch"], env["cuda"], env["cudnn"]
        ),
        f"{'mode':<12} {'batch':>5} {'img/s':>9} {'step ms':>8} {'peak GiB':>9} {'mem save':>8}  status",
    ]
    for r in report["modes"]:
        if r["status"] == "ok":
            saving = f"{r['mem_saving_vs_fp32']:.2f}x" if r.get("mem_saving_vs_fp32") else "-"
            lines.append(
                f"{r['mode']:<12} {r['batch_size']:>5} {r['images_per_s']:>9.1f} {r['step_ms']:>8.1f} "
                f"{r['peak_mem_gib']:>9.2f} {saving:>8}  ok"
            )
        else:
            lines.append(
                f"{r['mode']:<12} {r['batch_size']:>5} {'-':>9} {'-':>8} {'-':>9} {'-':>8}  {r['status']}: {r['error']}"
            )
    lines.append("RESULT {} (exit {})".format(report["status"], report["exit_code"]))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Host facts.
# ---------------------------------------------------------------------------------------------


def cudnn_version_text(torch: ModuleType) -> str | None:
    """The cuDNN torch was built with, as major.minor.patch; None without cuDNN."""
    if not torch.backends.cudnn.is_available():
        return None
    return dl_stack.format_version(dl_stack.decode_cudnn_version(torch.backends.cudnn.version()))


def environment(torch: ModuleType, model_source: str) -> dict[str, Any]:
    available = torch.cuda.is_available()
    try:
        import torchvision  # type: ignore[import-not-found, unused-ignore]

        vision: str | None = torchvision.__version__
    except Exception:
        vision = None
    return {
        "torch": torch.__version__,
        "torchvision": vision,
        "cuda": torch.version.cuda,
        "cudnn": cudnn_version_text(torch) if available else None,
        "gpu": torch.cuda.get_device_name(0) if available else None,
        "capability": "{}.{}".format(*torch.cuda.get_device_capability(0)) if available else None,
        "driver": dl_stack.read_driver_version(),
        "python": dl_stack.python_version(),
        "model": model_source,
    }


# ---------------------------------------------------------------------------------------------
# The model: torchvision's when it imports, else an identical built-in definition.
# ---------------------------------------------------------------------------------------------


def builtin_resnet50(torch: ModuleType, num_classes: int = NUM_CLASSES) -> Any:
    """ResNet-50 as torchvision defines it (v1.5: stride in the 3x3 conv, [3, 4, 6, 3] blocks),
    so numbers stay comparable on images whose torchvision is missing or broken."""
    nn: Any = torch.nn

    class Bottleneck(nn.Module):  # type: ignore[misc]
        expansion = 4

        def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Any = None) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * self.expansion, kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet50(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._layer(64, 3, 1)
            self.layer2 = self._layer(128, 4, 2)
            self.layer3 = self._layer(256, 6, 2)
            self.layer4 = self._layer(512, 3, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(module, nn.BatchNorm2d):
                    nn.init.constant_(module.weight, 1)
                    nn.init.constant_(module.bias, 0)

        def _layer(self, planes: int, blocks: int, stride: int) -> Any:
            downsample = None
            if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes * Bottleneck.expansion),
                )
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * Bottleneck.expansion
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50()


def resnet50_factory(torch: ModuleType) -> tuple[Callable[[], Any], str]:
    """(build function, where the model comes from). Never downloads weights."""
    try:
        import torchvision  # type: ignore[import-not-found, unused-ignore]
        from torchvision.models import resnet50  # type: ignore[import-not-found, unused-ignore]
    except Exception:  # absent, or built against another torch (fails with RuntimeError)
        return (lambda: builtin_resnet50(torch)), "built-in"

    def build() -> Any:
        try:
            return resnet50(weights=None)
        except TypeError:  # torchvision < 0.13 knows only pretrained=
            return resnet50(pretrained=False)

    return build, f"torchvision {torchvision.__version__}"


# ---------------------------------------------------------------------------------------------
# The timed training loop.
# ---------------------------------------------------------------------------------------------


def set_tf32(torch: ModuleType, enabled: bool) -> None:
    # The legacy flags exist from torch 1.7 through 2.x; matmul defaults to off and cuDNN to
    # on since 1.12, so fp32 must switch both off explicitly to be real FP32.
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def unsupported_reason(torch: ModuleType, mode: Mode) -> str | None:
    """Why this torch or GPU cannot run the mode at all (a skip, not a failure)."""
    if mode.compile and not hasattr(torch, "compile"):
        return f"torch.compile needs torch 2.0+, this is {torch.__version__}"
    if mode.autocast == "bfloat16":
        supported = getattr(torch.cuda, "is_bf16_supported", None)
        if not hasattr(torch, "autocast") or supported is None or not supported():
            return "bf16 autocast not supported by this GPU or torch"
    if mode.tf32 and torch.cuda.get_device_capability(0)[0] < 8:
        # TF32 needs Ampere; the flag is harmless elsewhere but the mode would just be fp32.
        if mode.name == "tf32":
            return "TF32 needs compute capability 8.0+"
    return None


def _zero_grad(optimizer: Any) -> None:
    try:
        optimizer.zero_grad(set_to_none=True)  # cheaper: no memset of every gradient
    except TypeError:  # torch < 1.7
        optimizer.zero_grad()


def training_step(
    torch: ModuleType,
    build_model: Callable[[], Any],
    mode: Mode,
    batch_size: int,
    device: Any,
    wrap: Callable[[Any], Any] | None = None,
) -> Callable[[], Any]:
    """One training step of the model on synthetic data made once on `device`; `wrap` puts the model under DDP."""
    set_tf32(torch, mode.tf32)
    torch.manual_seed(0)
    memory_format = torch.channels_last if mode.channels_last else torch.contiguous_format
    model = build_model().to(device).to(memory_format=memory_format)
    model.train()
    images = torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), device=device)
    criterion = torch.nn.CrossEntropyLoss()
    net = wrap(model) if wrap is not None else model
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    forward = torch.compile(net) if mode.compile else net
    scaler = dl_stack.torch_grad_scaler(torch) if mode.autocast == "float16" else None
    if not (images.is_cuda and labels.is_cuda and all(p.is_cuda for p in model.parameters())):
        raise RuntimeError("benchmark tensors are not on the GPU")

    def step() -> Any:
        _zero_grad(optimizer)
        with dl_stack.torch_autocast(torch, mode.autocast):
            loss = criterion(forward(images), labels)
        dl_stack.torch_backward_step(loss, optimizer, scaler)
        return loss

    return step


def timed_steps(
    torch: ModuleType, step: Callable[[], Any], warmup: int, iters: int, line_up: Callable[[], None] | None = None
) -> dict[str, float]:
    """Run `warmup` untimed then `iters` timed steps: {elapsed_s, warmup_s, final_loss}.

    `line_up` makes every process start the timed steps together (DDP)."""
    warm_start = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - warm_start
    if line_up is not None:
        line_up()
    # Synchronize only around the loop: a sync per step would time the host, not the GPU.
    start = time.perf_counter()
    for _ in range(iters):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    final_loss = float(loss.item())
    if not math.isfinite(final_loss):
        raise RuntimeError(f"loss is {final_loss}: the step is numerically broken")
    return {"elapsed_s": elapsed, "warmup_s": warmup_s, "final_loss": final_loss}


def time_mode(
    torch: ModuleType, build_model: Callable[[], Any], mode: Mode, batch_size: int, warmup: int, iters: int
) -> dict[str, Any]:
    """Train `iters` timed steps after `warmup`; data is made once, on the GPU."""
    step = training_step(torch, build_model, mode, batch_size, torch.device("cuda", 0))
    timing = timed_steps(torch, step, warmup, iters)
    elapsed = timing["elapsed_s"]
    return {
        "images_per_s": round(images_per_second(batch_size, iters, elapsed), 1),
        "step_ms": round(1000.0 * elapsed / iters, 2),
        "warmup_s": round(timing["warmup_s"], 1),
        "final_loss": round(timing["final_loss"], 4),
    }


def _is_oom(error: BaseException) -> bool:
    return "out of memory" in str(error).lower()


def run_mode(
    torch: ModuleType, build_model: Callable[[], Any], mode: Mode, batch_size: int, warmup: int, iters: int
) -> dict[str, Any]:
    """One mode's result row; errors become a status, so later modes still run."""
    result: dict[str, Any] = {
        "mode": mode.name,
        "description": mode.summary,
        "status": "ok",
        "batch_size": batch_size,
        "autocast": mode.autocast,
        "tf32": mode.tf32,
        "channels_last": mode.channels_last,
        "compiled": mode.compile,
        "images_per_s": None,
        "step_ms": None,
        "peak_mem_gib": None,
        "error": None,
    }
    reason = unsupported_reason(torch, mode)
    if reason is not None:
        result.update(status="skipped", error=reason)
        return result
    # Each mode starts from an empty cache so its peak is its own, not the previous mode's.
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(0)
    try:
        result.update(time_mode(torch, build_model, mode, batch_size, warmup, iters))
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(0) / GIB, 2)
        result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(0) / GIB, 2)
    except Exception as error:  # OOM, compile failures, driver errors: record and go on
        result.update(status="oom" if _is_oom(error) else "error", error=dl_stack.first_line(str(error)))
    gc.collect()
    torch.cuda.empty_cache()
    return result


# ---------------------------------------------------------------------------------------------
# Several GPUs: NCCL all-reduce bandwidth and DDP throughput, one process per GPU.
# ---------------------------------------------------------------------------------------------


def _line_up(torch: ModuleType, device: Any) -> None:
    """A barrier on the GPUs: a one-element all-reduce every process waits for (no host-side barrier to guess at)."""
    token = torch.zeros(1, device=device)
    torch.distributed.all_reduce(token)
    torch.cuda.synchronize(device)


def allreduce_times(
    torch: ModuleType, device: Any, rank: int, world: int, sizes: Sequence[int], warmup: int, iters: int
) -> list[dict[str, Any]]:
    """Seconds per all-reduce of each size (float32, in place), timed with CUDA events around `iters` calls."""
    dist = torch.distributed
    rows = []
    for size in sizes:
        buffer = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buffer)  # also the first warm-up: the result must be the sum of the ranks' values
        expected = world * (world + 1) / 2
        seen = (float(buffer[0]), float(buffer[-1]))
        if seen != (expected, expected):
            raise RuntimeError(f"all-reduce of {dl_stack.size_text(size)} gave {seen}, expected {expected:g}")
        buffer.zero_()  # zeros stay zeros: no overflow however many times it is summed
        for _ in range(warmup):
            dist.all_reduce(buffer)
        _line_up(torch, device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buffer)
        end.record()
        end.synchronize()
        rows.append({"bytes": size, "seconds": start.elapsed_time(end) / 1000.0 / iters})
        del buffer
    return rows


def multi_gpu_worker(rank: int, world: int, workdir: str, note: Callable[..., None], plan: dict[str, Any]) -> Any:
    """One rank: the all-reduce sizes (when the plan asks and world > 1), then DDP ResNet-50 training steps."""
    torch: Any = importlib.import_module("torch")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    note("init")
    dl_stack.torch_init_process_group(torch, "nccl", workdir, rank, world, WORKER_TIMEOUT_S)
    result: dict[str, Any] = {}
    if plan["allreduce"]:
        note("all_reduce")
        result["allreduce"] = allreduce_times(
            torch, device, rank, world, plan["sizes"], ALLREDUCE_WARMUP, ALLREDUCE_ITERS
        )
    note("ddp")
    # cuDNN autotuning picks the fastest convolution per shape; the shapes never change here.
    torch.backends.cudnn.benchmark = True
    build_model, model_source = resnet50_factory(torch)
    step = training_step(
        torch,
        build_model,
        MODES[plan["mode"]],
        plan["batch_size"],
        device,
        wrap=lambda model: dl_stack.torch_ddp(torch, model, rank),
    )
    torch.cuda.reset_peak_memory_stats(rank)
    timing: dict[str, Any] = dict(
        timed_steps(torch, step, plan["warmup"], plan["iters"], line_up=lambda: _line_up(torch, device))
    )
    timing["peak_mem_gib"] = torch.cuda.max_memory_allocated(rank) / GIB
    timing["model"] = model_source
    result["ddp"] = timing
    torch.distributed.destroy_process_group()
    return result


def allreduce_rows(
    outcomes: Sequence[dl_stack.WorkerOutcome], sizes: Sequence[int], world: int, names: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per message size: the slowest rank's time per all-reduce, as algorithm and bus bandwidth."""
    rows = []
    failed = any(o.state != dl_stack.OK for o in outcomes)
    for index, size in enumerate(sizes):
        row: dict[str, Any] = {
            "size": dl_stack.size_text(size),
            "bytes": size,
            "dtype": "float32",
            "gpus": world,
            "status": "ok",
            "time_us": None,
            "algbw_gbps": None,
            "busbw_gbps": None,
            "error": None,
        }
        if world < 2:
            row.update(status="skipped", error=f"needs 2 or more GPUs; {world} visible")
        elif failed:
            row.update(status="error", error=dl_stack.describe_worker_failures(outcomes, names))
        else:
            seconds = max(o.value["allreduce"][index]["seconds"] for o in outcomes)
            algbw, busbw = bus_bandwidth(size, seconds, world)
            row.update(time_us=round(seconds * 1e6, 1), algbw_gbps=round(algbw, 1), busbw_gbps=round(busbw, 1))
        rows.append(row)
    return rows


def ddp_row(
    outcomes: Sequence[dl_stack.WorkerOutcome], batch_size: int, iters: int, names: Sequence[str]
) -> dict[str, Any]:
    """Throughput of one DDP run: every GPU's images over the slowest GPU's time."""
    world = len(outcomes)
    row: dict[str, Any] = {
        "gpus": world,
        "status": "ok",
        "images_per_s": None,
        "step_ms": None,
        "peak_mem_gib": None,
        "warmup_s": None,
        "final_loss": None,
        "error": None,
    }
    if any(o.state != dl_stack.OK for o in outcomes):
        failures = dl_stack.describe_worker_failures(outcomes, names)
        oom = "out of memory" in failures.lower()
        row.update(status="oom" if oom else "error", error=failures)
        return row
    timings = [o.value["ddp"] for o in outcomes]
    elapsed = max(t["elapsed_s"] for t in timings)
    row.update(
        images_per_s=round(images_per_second(world * batch_size, iters, elapsed), 1),
        step_ms=round(1000.0 * elapsed / iters, 2),
        peak_mem_gib=round(max(t["peak_mem_gib"] for t in timings), 2),
        warmup_s=round(max(t["warmup_s"] for t in timings), 1),
        final_loss=round(timings[0]["final_loss"], 4),
    )
    return row


def run_multi_gpu(world: int, plan: dict[str, Any]) -> list[dl_stack.WorkerOutcome]:
    return dl_stack.run_workers(multi_gpu_worker, world, (plan,), timeout_s=WORKER_TIMEOUT_S)


def multi_gpu_report(
    torch: ModuleType, world: int, mode: str, batch_size: int, warmup: int, iters: int
) -> dict[str, Any]:
    """All-reduce rows and DDP throughput on one GPU and on `world` GPUs, run one after the other."""
    names = [torch.cuda.get_device_name(index) for index in range(world)]
    plan = {"mode": mode, "batch_size": batch_size, "warmup": warmup, "iters": iters, "sizes": list(ALLREDUCE_SIZES)}
    # One GPU first: the same DDP code at world size 1, the baseline the scaling is measured against.
    one = ddp_row(run_multi_gpu(1, {**plan, "allreduce": False}), batch_size, iters, names)
    sys.stderr.write(f"dl-bench: DDP on 1 GPU {one['status']} {one['images_per_s'] or ''}\n")
    all_gpus: dict[str, Any] | None = None
    outcomes: list[dl_stack.WorkerOutcome] = []
    if world > 1:
        outcomes = run_multi_gpu(world, {**plan, "allreduce": True})
        all_gpus = ddp_row(outcomes, batch_size, iters, names)
        sys.stderr.write(f"dl-bench: DDP on {world} GPUs {all_gpus['status']} {all_gpus['images_per_s'] or ''}\n")
    efficiency = None
    if all_gpus is not None and all_gpus["status"] == "ok" and one["status"] == "ok":
        efficiency = scaling_efficiency(all_gpus["images_per_s"], one["images_per_s"], world)
    return {
        "gpus": world,
        "gpu_names": names,
        "nccl": dl_stack.nccl_version_text(torch),
        "collective_env": dl_stack.collective_environment(),
        "allreduce": allreduce_rows(outcomes, ALLREDUCE_SIZES, world, names),
        "ddp": {
            "mode": mode,
            "description": MODES[mode].summary,
            "batch_size_per_gpu": batch_size,
            "one_gpu": one,
            "all_gpus": all_gpus,
            "scaling_efficiency": None if efficiency is None else round(efficiency, 4),
        },
    }


def decide_multi_gpu_outcome(multi: dict[str, Any]) -> tuple[str, int]:
    rows = [*multi["allreduce"], multi["ddp"]["one_gpu"]]
    if multi["ddp"]["all_gpus"] is not None:
        rows.append(multi["ddp"]["all_gpus"])
    return decide_outcome(rows)


def render_multi_gpu_table(report: dict[str, Any]) -> str:
    env, multi = report["environment"], report["multi_gpu"]
    ddp = multi["ddp"]
    lines = [
        "dl-bench --gpus: {} x {}, driver {}, torch {}, CUDA {}, cuDNN {}, NCCL {}".format(
            multi["gpus"], env["gpu"], env["driver"], env["torch"], env["cuda"], env["cudnn"], multi["nccl"]
        ),
        "NCCL/torch.distributed environment: {}".format(
            " ".join(f"{k}={v}" for k, v in multi["collective_env"].items()) or "none set"
        ),
        f"all-reduce, float32, in place, {ALLREDUCE_WARMUP} warmup + {ALLREDUCE_ITERS} timed:",
        f"{'size':>8} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  status",
    ]
    for r in multi["allreduce"]:
        if r["status"] == "ok":
            lines.append(f"{r['size']:>8} {r['time_us']:>10.1f} {r['algbw_gbps']:>11.1f} {r['busbw_gbps']:>11.1f}  ok")
        else:
            lines.append(f"{r['size']:>8} {'-':>10} {'-':>11} {'-':>11}  {r['status']}: {r['error']}")
    lines.append(
        "DDP ResNet-50 ({}), {}, batch {} per GPU, {} warmup + {} timed steps:".format(
            env["model"], ddp["description"], ddp["batch_size_per_gpu"], report["warmup"], report["iters"]
        )
    )
    for r in (ddp["one_gpu"], ddp["all_gpus"]):
        if r is None:
            continue
        if r["status"] == "ok":
            lines.append(f"{r['gpus']:>3} GPU(s) {r['images_per_s']:>10.1f} img/s {r['step_ms']:>8.1f} ms/step")
        else:
            lines.append(f"{r['gpus']:>3} GPU(s) {r['status']}: {r['error']}")
    if ddp["scaling_efficiency"] is not None:
        lines.append(f"scaling efficiency: {100 * ddp['scaling_efficiency']:.1f} %")
    lines.append("RESULT {} (exit {})".format(report["status"], report["exit_code"]))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dl-bench",
        description="Synthetic ResNet-50 training throughput and peak memory per precision mode; with --gpus all, "
        "NCCL all-reduce bus bandwidth and DDP throughput with its scaling over one GPU. "
        "Exit 0 passed, 1 a mode failed, 2 usage error, 77 no GPU.",
    )
    parser.add_argument(
        "--batch-size",
        action="append",
        metavar="N|MODE=N",
        help=f"batch size for all modes (default {DEFAULT_BATCH_SIZE}) or one mode, e.g. amp_fp16_cl=256; repeatable",
    )
    parser.add_argument(
        "--modes",
        help=f"comma-separated modes from {', '.join(MODES)} (default {','.join(DEFAULT_MODES)})",
    )
    parser.add_argument("--compile", action="store_true", help="also run the compile mode (torch.compile)")
    parser.add_argument(
        "--gpus",
        default="1",
        metavar="N|all",
        help="1 (default): the per-mode benchmark on GPU 0; all (or N): NCCL all-reduce bus bandwidth at "
        "16 MiB, 128 MiB and 1 GiB, and DDP ResNet-50 (one mode, default bf16_cl, batch 256 per GPU) on one "
        "GPU and on all, one process per GPU",
    )
    parser.add_argument(
        "--warmup", type=whole_number, default=10, help=f"untimed steps per mode (default 10, at most {MAX_STEPS})"
    )
    parser.add_argument(
        "--iters", type=whole_number, default=50, help=f"timed steps per mode (default 50, at most {MAX_STEPS})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    return parser


def emit(report: dict[str, Any], args: argparse.Namespace) -> bool:
    """Print the report and write it to --out; False (with a message) when --out could not be written."""
    text = json.dumps(report, indent=2)
    render = render_multi_gpu_table if report.get("multi_gpu") else render_table
    print(text if args.json else render(report))
    if args.out:
        try:
            with open(args.out, "w") as handle:
                handle.write(text + "\n")
        except OSError as error:
            sys.stderr.write(f"dl-bench: error: --out {args.out}: cannot write there ({error.strerror or error})\n")
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_steps(args.warmup, args.iters)
        gpus = parse_gpus(args.gpus)
        if gpus == 1:
            modes = parse_modes(args.modes, args.compile)
            batch_sizes = parse_batch_sizes(args.batch_size, modes)
        else:
            modes = [multi_gpu_mode(args.modes, args.compile)]
            batch_sizes = parse_batch_sizes(args.batch_size, modes, DDP_BATCH_SIZE)
        if args.out is not None:
            check_writable(args.out)
        try:
            import torch
        except Exception as error:  # a broken install raises OSError etc., not only ImportError
            error_text = f"{type(error).__name__}: {dl_stack.first_line(str(error))}"
            raise dl_stack.UsageError(f"cannot import torch ({error_text})") from None
    except dl_stack.UsageError as error:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"dl-bench: error: {error}\n")
        return dl_stack.EXIT_USAGE

    build_model, model_source = resnet50_factory(torch)
    report: dict[str, Any] = {
        "status": "skipped",
        "exit_code": dl_stack.EXIT_SKIPPED,
        "benchmark": "resnet50-synthetic-train" if gpus == 1 else "multi-gpu-allreduce-ddp-resnet50",
        "warmup": args.warmup,
        "iters": args.iters,
        "environment": environment(torch, model_source),
    }
    if gpus == 1:
        report["modes"] = []
    else:
        report["multi_gpu"] = None
    if not torch.cuda.is_available():
        sys.stderr.write("dl-bench: no GPU visible to torch; skipped (exit 77)\n")
        if (args.json or args.out) and not emit(report, args):
            return dl_stack.EXIT_USAGE
        return dl_stack.EXIT_SKIPPED
    if gpus != 1:
        return bench_multi_gpu(torch, args, report, gpus, modes[0], batch_sizes[modes[0]], parser)

    # cuDNN autotuning picks the fastest convolution per shape; the shapes never change here.
    torch.backends.cudnn.benchmark = True
    results = []
    for name in modes:
        result = run_mode(torch, build_model, MODES[name], batch_sizes[name], args.warmup, args.iters)
        results.append(result)
        # Progress on stderr keeps stdout a single JSON object with --json.
        sys.stderr.write(f"dl-bench: {name} {result['status']} {result['images_per_s'] or ''}\n")
    add_memory_savings(results)
    report["modes"] = results
    report["status"], report["exit_code"] = decide_outcome(results)
    if not emit(report, args):
        return dl_stack.EXIT_USAGE
    return int(report["exit_code"])


def bench_multi_gpu(
    torch: ModuleType,
    args: argparse.Namespace,
    report: dict[str, Any],
    wanted: int | None,
    mode: str,
    batch_size: int,
    parser: argparse.ArgumentParser,
) -> int:
    """--gpus all (None) or N: the multi-GPU report, printed and written as the per-mode one is."""
    visible = torch.cuda.device_count()
    if wanted is not None and wanted > visible:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"dl-bench: error: --gpus {wanted}: only {visible} GPU(s) visible\n")
        return dl_stack.EXIT_USAGE
    world = visible if wanted is None else wanted
    report["multi_gpu"] = multi_gpu_report(torch, world, mode, batch_size, args.warmup, args.iters)
    report["status"], report["exit_code"] = decide_multi_gpu_outcome(report["multi_gpu"])
    if not emit(report, args):
        return dl_stack.EXIT_USAGE
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
