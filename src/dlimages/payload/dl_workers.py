"""One worker process per GPU, the way dl-smoke and dl-bench both run torch.distributed over NCCL: start them, place a
failure (which GPU, at which stage, how it ended), and the torch calls both need for it.

It travels into every image beside dl_stack.py, so like it it is standalone (stdlib only) and stays compatible
with Python 3.8.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import datetime
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from .dl_stack import decode_nccl_version, first_line, format_version
else:
    from dl_stack import decode_nccl_version, first_line, format_version


# --- one worker process per GPU ----------------------------------------------------------------------------------

# Environment variables that steer NCCL and torch.distributed. The workers inherit the whole environment unchanged
# (spawn starts them with os.environ); these are only named in reports. Nothing here ever sets one: a node that
# turns NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1) keeps it off.
COLLECTIVE_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "TORCH_DISTRIBUTED_")

OK = "ok"
ERROR = "error"  # the worker raised
DIED = "died"  # the worker exited without a result: a signal (cuDNN 8 aborts when a library is missing), exit()
TIMEOUT = "timeout"  # still running at the deadline
STOPPED = "stopped"  # stopped because another worker had failed (it would wait for that one forever)
# After one worker fails, the others get this long to finish or fail on their own before they are stopped.
FAILURE_GRACE_S = 20.0


class WorkerOutcome(NamedTuple):
    """How one worker process ended: its state, what it returned, and how far it got."""

    rank: int
    state: str  # OK, ERROR, DIED, TIMEOUT or STOPPED
    value: Any  # what the target returned (JSON data), for OK
    error: str  # the exception or signal, for the other states
    stage: str  # the last stage the worker announced with note()
    output: str  # the end of what it wrote to fd 1 and 2 (native libraries such as cuDNN and NCCL write there)


def collective_environment() -> dict[str, str]:
    """The NCCL and torch.distributed variables set in this environment, as the workers see them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(COLLECTIVE_ENV_PREFIXES)}


def _write_json(path: str, data: Any) -> None:
    # Write then rename: the parent never reads half a file, even from a worker killed mid-write.
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def _read_json(path: str) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _worker_entry(target: Callable[..., Any], rank: int, world: int, workdir: str, args: tuple[Any, ...]) -> None:
    """What each worker process runs: its fds 1 and 2 go to a log the parent reads, then `target` runs."""
    log = os.open(os.path.join(workdir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)

    def note(stage: str, data: Any = None) -> None:
        _write_json(os.path.join(workdir, f"rank{rank}.stage"), {"stage": stage, "data": data})

    result_path = os.path.join(workdir, f"rank{rank}.json")
    try:
        value = target(rank, world, workdir, note, *args)
    except BaseException as error:  # every failure, SystemExit too, is the parent's to report
        text = f"{type(error).__name__}: {error}".strip()
        _write_json(result_path, {"state": ERROR, "error": text, "traceback": traceback.format_exc()[-4000:]})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip interpreter teardown: NCCL's and CUDA's destructors can hang after an error
    _write_json(result_path, {"state": OK, "value": value})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the result is written; teardown has nothing left to give and can only hang


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_workers(
    target: Callable[..., Any], world: int, args: Sequence[Any] = (), *, timeout_s: float
) -> list[WorkerOutcome]:
    """Run `target(rank, world, workdir, note, *args)` in `world` fresh processes (spawn, as CUDA requires) and
    report how each ended. `workdir` is a private folder the workers share (a torch.distributed file store lives
    there); `note(stage, data)` records how far a worker got, so a hang or a crash can be placed.

    The workers inherit this process's environment unchanged. When one fails, the others get FAILURE_GRACE_S to end
    on their own (a collective they wait in may fail too), then they are stopped; at `timeout_s` everything is.
    `target` must be a module-level function: spawn imports it again in each worker.
    """
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="dl-workers-") as workdir:
        # Not daemons: a worker may start processes of its own (torch.compile's compiler pool).
        processes = [
            context.Process(target=_worker_entry, args=(target, rank, world, workdir, tuple(args)))
            for rank in range(world)
        ]
        started = time.monotonic()
        ended_by_us: dict[int, str] = {}
        try:
            for process in processes:
                process.start()
            first_failure: float | None = None
            while any(p.is_alive() for p in processes):
                multiprocessing.connection.wait([p.sentinel for p in processes if p.is_alive()], timeout=0.5)
                now = time.monotonic()
                if first_failure is None and any(p.exitcode not in (None, 0) for p in processes):
                    first_failure = now
                if now - started > timeout_s:
                    reason = TIMEOUT
                elif first_failure is not None and now - first_failure > FAILURE_GRACE_S:
                    reason = STOPPED
                else:
                    continue
                for rank, process in enumerate(processes):
                    if process.is_alive():
                        ended_by_us[rank] = reason
                break
        finally:
            # Also on Ctrl-C: no worker outlives the command, holding a GPU.
            for process in processes:
                if process.is_alive():
                    process.kill()
            for process in processes:
                if process.pid is not None:
                    process.join(10)
        return [
            _outcome(rank, process.exitcode, ended_by_us.get(rank), workdir, time.monotonic() - started)
            for rank, process in enumerate(processes)
        ]


def _outcome(rank: int, exitcode: int | None, ended_by_us: str | None, workdir: str, elapsed: float) -> WorkerOutcome:
    result = _read_json(os.path.join(workdir, f"rank{rank}.json")) or {}
    stage_file = _read_json(os.path.join(workdir, f"rank{rank}.stage")) or {}
    try:
        with open(os.path.join(workdir, f"rank{rank}.log"), "rb") as handle:
            output = handle.read()[-8000:].decode("utf-8", "replace")
    except OSError:
        output = ""
    stage = str(stage_file.get("stage") or "start")
    if result.get("state") == OK:
        return WorkerOutcome(rank, OK, result.get("value"), "", stage, output)
    if result.get("state") == ERROR:
        return WorkerOutcome(rank, ERROR, stage_file.get("data"), str(result.get("error")), stage, output)
    partial = stage_file.get("data")
    if ended_by_us == TIMEOUT:
        return WorkerOutcome(rank, TIMEOUT, partial, f"still running after {elapsed:.0f} s", stage, output)
    if ended_by_us == STOPPED:
        return WorkerOutcome(rank, STOPPED, partial, "stopped after another worker failed", stage, output)
    if exitcode is not None and exitcode < 0:
        why = f"killed by {_signal_name(exitcode)}"
    else:
        why = f"exited with code {exitcode} and no result"
    return WorkerOutcome(rank, DIED, partial, why, stage, output)


def _nccl_warning(output: str) -> str:
    """NCCL's own warning line, which says more than the exception (printed when NCCL_DEBUG is set)."""
    lines = [line.strip() for line in output.splitlines() if "NCCL WARN" in line]
    return f"; {first_line(lines[-1], 200)}" if lines else ""


def describe_worker_failures(outcomes: Sequence[WorkerOutcome], names: Sequence[str]) -> str:
    """Which GPU failed, where and how: the workers that raised or died first, then those that hung."""

    def gpu(rank: int) -> str:
        return f"GPU {rank} ({names[rank]})"

    culprits = [o for o in outcomes if o.state in (ERROR, DIED)]
    hung = [o for o in outcomes if o.state == TIMEOUT]
    stopped = [o for o in outcomes if o.state == STOPPED]
    parts = []
    for o in culprits:
        how = "" if o.state == ERROR else f" (the process died: {o.error})"
        error = o.error if o.state == ERROR else (o.output.strip().splitlines() or ["no output"])[-1]
        said = first_line(error, 240) + _nccl_warning(o.output)
        parts.append(f"{gpu(o.rank)} failed in {o.stage}{how}: {said}")
    if hung:
        where = ", ".join(f"{gpu(o.rank)} in {o.stage}" for o in hung)
        parts.append(f"still waiting when stopped ({hung[0].error}): {where}")
    if stopped:
        parts.append("then stopped: " + ", ".join(f"GPU {o.rank} (in {o.stage})" for o in stopped))
    return "; ".join(parts) if parts else "no worker reported a result"


def size_text(size: int) -> str:
    """Bytes as people write message sizes: 16 MiB, 1 GiB, 512 KiB, 100 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def torch_init_process_group(
    torch: ModuleType, backend: str, workdir: str, rank: int, world: int, timeout_s: float
) -> None:
    """Join the workers' process group through a file store in `workdir` (no port to race for, no network)."""
    torch.distributed.init_process_group(
        backend,
        init_method="file://" + os.path.join(workdir, "store"),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def torch_ddp(torch: ModuleType, model: Any, device_index: int | None) -> Any:
    """`model` under DistributedDataParallel; gradients as views of the all-reduce buckets where torch has it (1.7+)."""
    ddp = torch.nn.parallel.DistributedDataParallel
    ids = None if device_index is None else [device_index]
    try:
        return ddp(model, device_ids=ids, output_device=device_index, gradient_as_bucket_view=True)
    except TypeError:
        return ddp(model, device_ids=ids, output_device=device_index)


def nccl_version_text(torch: ModuleType) -> str | None:
    """The NCCL this torch carries, as major.minor.patch; None without NCCL."""
    try:
        return format_version(decode_nccl_version(torch.cuda.nccl.version()))
    except Exception:  # no NCCL in this build, or no CUDA
        return None


def peer_access(torch: ModuleType, count: int) -> list[tuple[int, int]]:
    """Pairs of GPUs with direct peer-to-peer access (NVLink or PCIe P2P); NCCL goes through host memory otherwise."""
    can = getattr(torch.cuda, "can_device_access_peer", None)
    if can is None:
        return []
    return [(a, b) for a in range(count) for b in range(a + 1, count) if can(a, b) and can(b, a)]
