"""dl-bench on several GPUs, one process per GPU: NCCL all-reduce bus bandwidth by message size, and DDP ResNet-50
throughput on all GPUs against one GPU in the same run. A part of dl-bench (dl_bench.py).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_bench.py.
if TYPE_CHECKING or __package__:
    from . import dl_bench_training as training
    from . import dl_workers
else:
    import dl_bench_training as training
    import dl_workers

# --gpus all: all-reduce message sizes (float32) and counts as nccl-tests runs them (-w 5 -n 20, here more of
# each for steadier figures).
ALLREDUCE_SIZES = (16 * 2**20, 128 * 2**20, 2**30)
ALLREDUCE_WARMUP = 10
ALLREDUCE_ITERS = 50
# A safety net for a hung collective, not a budget: cuDNN autotuning and torch.compile take minutes on slow GPUs.
WORKER_TIMEOUT_S = 1800


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
            raise RuntimeError(f"all-reduce of {dl_workers.size_text(size)} gave {seen}, expected {expected:g}")
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
    """One rank: the all-reduce sizes (when the plan asks and world > 1), then DDP ResNet-50 training steps in the
    plan's mode (a dl_bench_training.Mode)."""
    torch: Any = importlib.import_module("torch")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    note("init")
    dl_workers.torch_init_process_group(torch, "nccl", workdir, rank, world, WORKER_TIMEOUT_S)
    result: dict[str, Any] = {}
    if plan["allreduce"]:
        note("all_reduce")
        result["allreduce"] = allreduce_times(
            torch, device, rank, world, plan["sizes"], ALLREDUCE_WARMUP, ALLREDUCE_ITERS
        )
    note("ddp")
    # cuDNN autotuning picks the fastest convolution per shape; the shapes never change here.
    torch.backends.cudnn.benchmark = True
    build_model, model_source = training.resnet50_factory(torch)
    step = training.training_step(
        torch,
        build_model,
        plan["mode"],
        plan["batch_size"],
        device,
        wrap=lambda model: dl_workers.torch_ddp(torch, model, rank),
    )
    torch.cuda.reset_peak_memory_stats(rank)
    timing: dict[str, Any] = dict(
        training.timed_steps(torch, step, plan["warmup"], plan["iters"], line_up=lambda: _line_up(torch, device))
    )
    timing["peak_mem_gib"] = torch.cuda.max_memory_allocated(rank) / training.GIB
    timing["model"] = model_source
    result["ddp"] = timing
    torch.distributed.destroy_process_group()
    return result


def allreduce_rows(
    outcomes: Sequence[dl_workers.WorkerOutcome], sizes: Sequence[int], world: int, names: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per message size: the slowest rank's time per all-reduce, as algorithm and bus bandwidth."""
    rows = []
    failed = any(o.state != dl_workers.OK for o in outcomes)
    for index, size in enumerate(sizes):
        row: dict[str, Any] = {
            "size": dl_workers.size_text(size),
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
            row.update(status="error", error=dl_workers.describe_worker_failures(outcomes, names))
        else:
            seconds = max(o.value["allreduce"][index]["seconds"] for o in outcomes)
            algbw, busbw = bus_bandwidth(size, seconds, world)
            row.update(time_us=round(seconds * 1e6, 1), algbw_gbps=round(algbw, 1), busbw_gbps=round(busbw, 1))
        rows.append(row)
    return rows


def ddp_row(
    outcomes: Sequence[dl_workers.WorkerOutcome], batch_size: int, iters: int, names: Sequence[str]
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
    if any(o.state != dl_workers.OK for o in outcomes):
        failures = dl_workers.describe_worker_failures(outcomes, names)
        oom = "out of memory" in failures.lower()
        row.update(status="oom" if oom else "error", error=failures)
        return row
    timings = [o.value["ddp"] for o in outcomes]
    elapsed = max(t["elapsed_s"] for t in timings)
    row.update(
        images_per_s=round(training.images_per_second(world * batch_size, iters, elapsed), 1),
        step_ms=round(1000.0 * elapsed / iters, 2),
        peak_mem_gib=round(max(t["peak_mem_gib"] for t in timings), 2),
        warmup_s=round(max(t["warmup_s"] for t in timings), 1),
        final_loss=round(timings[0]["final_loss"], 4),
    )
    return row


def run_multi_gpu(world: int, plan: dict[str, Any]) -> list[dl_workers.WorkerOutcome]:
    return dl_workers.run_workers(multi_gpu_worker, world, (plan,), timeout_s=WORKER_TIMEOUT_S)


def multi_gpu_report(
    torch: ModuleType, world: int, mode: training.Mode, batch_size: int, warmup: int, iters: int
) -> dict[str, Any]:
    """All-reduce rows and DDP throughput in `mode` on one GPU and on `world` GPUs, run one after the other."""
    names = [torch.cuda.get_device_name(index) for index in range(world)]
    plan = {"mode": mode, "batch_size": batch_size, "warmup": warmup, "iters": iters, "sizes": list(ALLREDUCE_SIZES)}
    # One GPU first: the same DDP code at world size 1, the baseline the scaling is measured against.
    one = ddp_row(run_multi_gpu(1, {**plan, "allreduce": False}), batch_size, iters, names)
    sys.stderr.write(f"dl-bench: DDP on 1 GPU {one['status']} {one['images_per_s'] or ''}\n")
    all_gpus: dict[str, Any] | None = None
    outcomes: list[dl_workers.WorkerOutcome] = []
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
        "nccl": dl_workers.nccl_version_text(torch),
        "collective_env": dl_workers.collective_environment(),
        "allreduce": allreduce_rows(outcomes, ALLREDUCE_SIZES, world, names),
        "ddp": {
            "mode": mode.name,
            "description": mode.summary,
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
    return training.decide_outcome(rows)


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
