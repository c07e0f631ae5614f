#!/usr/bin/env python3
"""A minimal, independent measurement of what `dl-bench --gpus all` reports, to tell a slow benchmark from a slow
machine when the two are run side by side: NCCL all-reduce bus bandwidth (16 MiB, 128 MiB, 1 GiB float32) and
ResNet-50 training throughput (torchvision, bf16 autocast, channels_last, batch 256 per GPU, synthetic data) on one
GPU without DDP and on every GPU with DDP. Shares no code with dl-bench: torch.multiprocessing.spawn, a TCP
rendezvous on a free port, plain loops. Prints one JSON object. Not a test (pytest collects test_*.py only).

    python3 tests/gpu/reference_multi_gpu.py [--warmup 10] [--iters 50]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

SIZES = (16 * 2**20, 128 * 2**20, 2**30)
BATCH = 256


def resnet_step(device: torch.device, ddp_rank: int | None) -> Any:
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    if ddp_rank is not None:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[ddp_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(BATCH, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (BATCH,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


def timed(step: Any, warmup: int, iters: int, sync: Any = None) -> float:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    if sync is not None:
        sync()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def worker(rank: int, world: int, port: int, warmup: int, iters: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    allreduce = []
    for size in SIZES:
        x = torch.zeros(size // 4, device=device)
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier(device_ids=[rank])
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(50):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        seconds = begin.elapsed_time(end) / 1000 / 50
        algbw = size / seconds / 1e9
        allreduce.append({"bytes": size, "time_us": seconds * 1e6, "busbw_gbps": algbw * 2 * (world - 1) / world})
        del x
    elapsed = timed(resnet_step(device, rank), warmup, iters, sync=lambda: dist.barrier(device_ids=[rank]))
    with open(f"{out}.{rank}", "w") as handle:
        json.dump({"allreduce": allreduce, "elapsed_s": elapsed}, handle)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    world = torch.cuda.device_count()
    one = timed(resnet_step(torch.device("cuda", 0), None), args.warmup, args.iters)
    torch.cuda.empty_cache()
    one_ips = BATCH * args.iters / one
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "rank")
        mp.spawn(worker, args=(world, port, args.warmup, args.iters, out), nprocs=world)
        ranks = []
        for rank in range(world):
            with open(f"{out}.{rank}") as handle:
                ranks.append(json.load(handle))
    all_ips = world * BATCH * args.iters / max(r["elapsed_s"] for r in ranks)
    rows = [
        {"size_mib": size // 2**20, "busbw_gbps": round(min(r["allreduce"][i]["busbw_gbps"] for r in ranks), 1)}
        for i, size in enumerate(SIZES)
    ]
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpus": world,
                "allreduce": rows,
                "resnet50_bf16_cl_batch256": {
                    "one_gpu_no_ddp_images_per_s": round(one_ips, 1),
                    "all_gpus_ddp_images_per_s": round(all_ips, 1),
                    "scaling_efficiency": round(all_ips / (world * one_ips), 4),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
