"""The single-GPU side of dl-bench: the ResNet-50 (torchvision's, else an identical built-in one), one timed
training step per precision mode, and the versions the report states. A part of dl-bench (dl_bench.py).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_bench.py.
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


# ---------------------------------------------------------------------------------------------
# Results: throughput and the run's outcome.
# ---------------------------------------------------------------------------------------------


def images_per_second(batch_size: int, iters: int, seconds: float) -> float:
    return batch_size * iters / seconds if seconds > 0 else 0.0


def decide_outcome(results: Sequence[dict[str, Any]]) -> tuple[str, int]:
    """A mode that errored fails the run; a mode skipped as unsupported does not."""
    if any(r["status"] not in ("ok", "skipped") for r in results):
        return "failed", dl_stack.EXIT_FAILED
    return "passed", dl_stack.EXIT_PASSED


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
