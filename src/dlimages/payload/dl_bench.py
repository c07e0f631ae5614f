#!/usr/bin/env python3
"""Training benchmark run inside a dlimages image (installed as `dl-bench`): synthetic ResNet-50
throughput (images/s) and peak GPU memory per precision mode, to prove an image is not only
correct but configured to be fast (TF32, AMP, channels_last, torch.compile). With `--gpus all`:
NCCL all-reduce bus bandwidth by message size, and DDP ResNet-50 throughput on all GPUs against
one GPU in the same run (scaling efficiency), one process per GPU.

Standalone on purpose (stdlib, torch, torchvision optional, and beside it dl_stack.py, dl_command.py
and its own parts, dl_bench_*.py): it is copied into images and also runs as a plain script on any
host, so it must not import dlimages. It stays compatible with Python 3.8, the oldest Python in the
matrix, and with torch 1.7 onwards (newer APIs are looked up with hasattr).

Its parts, each imported as a sibling module: dl_bench_training (the model and the timed training
step on one GPU) and dl_bench_multigpu (all-reduce and DDP, one process per GPU). This file holds the
command: the modes, flags and the per-mode report.

Exit codes: 0 every mode ran (or was skipped as unsupported), 1 a mode failed, 2 usage error,
77 skipped (no GPU visible).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside this file, in images (/usr/local/bin) as in the source tree. Run as a plain
# script there is no package and the script's own folder comes first on sys.path; imported as
# dlimages.payload.dl_bench (and by mypy) they are the package's sibling modules.
if TYPE_CHECKING or __package__:
    from . import dl_bench_multigpu as multigpu
    from . import dl_bench_training as training
    from . import dl_command, dl_stack
    from .dl_command import whole_number
else:
    import dl_bench_multigpu as multigpu
    import dl_bench_training as training
    import dl_command
    import dl_stack
    from dl_command import whole_number

# What `dl-bench --help` says it does, before the exit codes.
SUMMARY = (
    "Synthetic ResNet-50 training throughput and peak memory per precision mode; with --gpus all, NCCL all-reduce bus "
    "bandwidth and DDP throughput with its scaling over one GPU."
)
MODES = {
    m.name: m
    for m in (
        training.Mode("fp32", None, False, False, False, "FP32, TF32 off for matmul and cuDNN"),
        training.Mode("tf32", None, True, False, False, "FP32 storage, TF32 math"),
        training.Mode("amp_fp16", "float16", True, False, False, "AMP fp16 + GradScaler"),
        training.Mode("amp_fp16_cl", "float16", True, True, False, "AMP fp16 + channels_last"),
        training.Mode("bf16_cl", "bfloat16", True, True, False, "AMP bf16 + channels_last"),
        training.Mode("compile", "bfloat16", True, True, True, "AMP bf16 + channels_last + torch.compile"),
    )
}
DEFAULT_MODES = ("fp32", "tf32", "amp_fp16", "amp_fp16_cl", "bf16_cl")
DEFAULT_BATCH_SIZE = 128
# Upper bounds on the numbers a person types: far above any real run (a batch of 65536 images needs terabytes),
# low enough that a typo, or 10**30, is a usage error at once instead of an hour-long run or an overflow.
MAX_BATCH_SIZE = 65536
MAX_STEPS = 100000
# --gpus all: the DDP mode and per-GPU batch of the published H200 figures.
DDP_MODE = "bf16_cl"
DDP_BATCH_SIZE = 256
MAX_GPUS = 1024


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
    value = int(text) if dl_command.DIGITS.fullmatch(text) and len(text) <= 24 else 0
    if not 1 <= value <= most:
        raise dl_stack.UsageError(f"{what} must be a positive integer up to {most}, got {text[:40]!r}")
    return value


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


def render_table(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "dl-bench: ResNet-50 ({}) training, synthetic {}x{} data, {} warmup + {} timed steps".format(
            env["model"], training.IMAGE_SIZE, training.IMAGE_SIZE, report["warmup"], report["iters"]
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
# Command line.
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = dl_command.command_parser("dl-bench", SUMMARY, failed="a mode failed")
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
    render = multigpu.render_multi_gpu_table if report.get("multi_gpu") else render_table
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
        return dl_command.usage_error(parser, error)

    build_model, model_source = training.resnet50_factory(torch)
    report: dict[str, Any] = {
        "status": "skipped",
        "exit_code": dl_stack.EXIT_SKIPPED,
        "benchmark": "resnet50-synthetic-train" if gpus == 1 else "multi-gpu-allreduce-ddp-resnet50",
        "warmup": args.warmup,
        "iters": args.iters,
        "environment": training.environment(torch, model_source),
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
        result = training.run_mode(torch, build_model, MODES[name], batch_sizes[name], args.warmup, args.iters)
        results.append(result)
        # Progress on stderr keeps stdout a single JSON object with --json.
        sys.stderr.write(f"dl-bench: {name} {result['status']} {result['images_per_s'] or ''}\n")
    add_memory_savings(results)
    report["modes"] = results
    report["status"], report["exit_code"] = training.decide_outcome(results)
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
        return dl_command.usage_error(parser, f"--gpus {wanted}: only {visible} GPU(s) visible")
    world = visible if wanted is None else wanted
    report["multi_gpu"] = multigpu.multi_gpu_report(torch, world, MODES[mode], batch_size, args.warmup, args.iters)
    report["status"], report["exit_code"] = multigpu.decide_multi_gpu_outcome(report["multi_gpu"])
    if not emit(report, args):
        return dl_stack.EXIT_USAGE
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
