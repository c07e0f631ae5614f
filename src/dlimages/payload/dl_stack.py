"""Facts and rules about the deep-learning GPU stack that dl-smoke, dl-bench and the dlimages package share:
the framework table, exit codes, version reading (cuDNN's and NCCL's encodings, the driver), CUDA's arch rule,
and the way both commands start one worker process per GPU (torch.distributed over NCCL).

It travels into every image beside dl-smoke and dl-bench, so like them it is standalone (stdlib only) and stays
compatible with Python 3.8, the oldest Python in the matrix. The package imports it as `dlimages.payload.dl_stack`;
the scripts import it as their sibling `dl_stack` when they run as plain files.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import contextlib
import datetime
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
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
