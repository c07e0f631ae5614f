"""The PyTorch work dl-smoke runs on the GPUs: the conv model's AMP training loop, and the workers that
dl_workers.run_workers starts in a fresh process per GPU (the cuDNN probe, the NCCL all-reduce and DDP step, an
all-reduce within each pair of GPUs). A part of dl-smoke (dl_smoke.py).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_smoke_rules as rules
    from . import dl_stack, dl_workers
else:
    import dl_smoke_rules as rules
    import dl_stack
    import dl_workers


def _off_gpu(tensors: dict[str, Any]) -> list[str]:
    return [name for name, t in tensors.items() if t is not None and not t.is_cuda]


def conv_model(torch: ModuleType) -> Any:
    """Two convolutions with batch norm, pooled into a linear classifier: cuDNN's convolution and batch-norm kernels,
    forward and backward, in a model that trains in a few steps."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(rules.TRAIN_CHANNELS, rules.TRAIN_WIDTH, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(rules.TRAIN_WIDTH),
        nn.ReLU(),
        nn.Conv2d(rules.TRAIN_WIDTH, 2 * rules.TRAIN_WIDTH, kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(2 * rules.TRAIN_WIDTH),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * rules.TRAIN_WIDTH, rules.TRAIN_CLASSES),
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
    torch.manual_seed(rules.TRAIN_SEED)
    model = conv_model(torch).to(device).to(memory_format=layout)
    teacher = torch.randn(rules.TRAIN_CHANNELS, rules.TRAIN_CLASSES, device=device)
    torch.manual_seed(rules.TRAIN_SEED + 1 + rank)
    x = torch.randn(rules.TRAIN_SAMPLES, rules.TRAIN_CHANNELS, rules.TRAIN_IMAGE, rules.TRAIN_IMAGE, device=device)
    x = x.contiguous(memory_format=layout)
    y = (x.mean(dim=(2, 3)) @ teacher).argmax(dim=1)  # learnable labels: the mean colour decides the class
    net = wrap(model) if wrap is not None else model
    optimizer = torch.optim.Adam(net.parameters(), lr=rules.TRAIN_LR)
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


# --- workers: each runs in a fresh process per GPU (dl_workers.run_workers), whose spawn imports it again by name ---


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
    conv = torch.nn.Conv2d(rules.TRAIN_CHANNELS, rules.TRAIN_WIDTH, kernel_size=3, padding=1)
    conv = conv.to(device).to(memory_format=layout)
    x = torch.randn(8, rules.TRAIN_CHANNELS, rules.TRAIN_IMAGE, rules.TRAIN_IMAGE, device=device)
    x = x.contiguous(memory_format=layout)
    with dl_stack.torch_autocast(torch, dtype):
        out = conv(x.requires_grad_())
    out.float().square().mean().backward()
    torch.cuda.synchronize(device)
    return {"cudnn": version, "convolved": True}


def _join(rank: int, world: int, workdir: str, note: Callable[..., None], plan: dict[str, Any]) -> tuple[Any, Any]:
    """(torch, this rank's device) once the rank has joined the process group of the plan's backend; the GPU `rank`
    is this process's current device when the plan's device is "cuda"."""
    torch = importlib.import_module("torch")
    cuda = plan["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    note("init")
    dl_workers.torch_init_process_group(torch, plan["backend"], workdir, rank, world, plan["timeout_s"])
    return torch, device


def multi_gpu_worker(rank: int, world: int, workdir: str, note: Callable[..., None], plan: dict[str, Any]) -> Any:
    """One rank of the multi-GPU check: all-reduce a known sum, then train the conv model under DDP.

    plan: backend ("nccl"; "gloo" in the CPU tests), device ("cuda" or "cpu"), dtype (autocast, or None), steps,
    channels_last, elements (per all-reduce), timeout_s."""
    torch, device = _join(rank, world, workdir, note, plan)
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
        wrap=lambda net: dl_workers.torch_ddp(torch, net, rank if device.type == "cuda" else None),
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
    torch, device = _join(rank, world, workdir, note, plan)
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
