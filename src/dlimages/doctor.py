"""The GPU-node doctor: which images of the matrix will run on a GPU node, and why not.

Pure functions decide (`kernels_for`, `verdict`, `report`, `format_report`) from a `Node`; only the probe
(`probe_host` and its helpers) runs commands, through a `Runner` that tests replace.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlimages.cells import Cell
from dlimages.errors import InputError, Problem
from dlimages.payload import dl_stack
from dlimages.runner import DEFAULT, Runner

NVIDIA_SMI_TIMEOUT_S = 20  # a wedged driver makes nvidia-smi hang rather than fail
DOCKER_TIMEOUT_S = 15
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
RUNTIME_MISSING = (
    "the NVIDIA container runtime is not configured for Docker "
    "(no nvidia runtime in `docker info`, no nvidia-container-runtime-hook for --gpus, no CDI spec)"
)
NO_DRIVER = "no NVIDIA driver found (nvidia-smi missing or failing)"
NO_GPU = "no NVIDIA GPU visible"


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str | None  # "sm_90"; None when the probe could not read the compute capability


@dataclass(frozen=True)
class Node:
    """What the doctor knows about a GPU node, probed on this host or given by flags."""

    driver: str | None  # None: no working NVIDIA driver found
    gpus: tuple[Gpu, ...]
    container_runtime: bool | None  # None: not checked (Docker not reachable, or a node given by flags)
    source: str  # "this host" or "given"


@dataclass(frozen=True)
class Verdict:
    runs: bool
    reasons: tuple[str, ...]  # why it does not run; empty when it runs
    notes: tuple[str, ...]  # caveats that do not stop it (slow first start, nothing checked, fallbacks)


# --- parsing user input ------------------------------------------------------------------------------

_ARCH_FORMS = (
    re.compile(r"sm_(?P<major>[1-9][0-9]?)(?P<minor>[0-9])"),  # sm_90, sm_100
    re.compile(r"(?P<major>[1-9][0-9]?)\.(?P<minor>[0-9])"),  # 9.0, 10.0 (nvidia-smi's compute_cap)
    re.compile(r"(?P<major>[1-9][0-9]?)(?P<minor>[0-9])"),  # 90, 100
)
# ASCII digits only: Python's \d also matches other scripts' digits, which no driver version has.
_DRIVER = re.compile(r"[0-9]{3,4}\.[0-9]{1,3}(\.[0-9]{1,3})?")


def parse_arch(text: str) -> str:
    """A GPU architecture as sm_XY, from "sm_90", "9.0" or "90"; InputError on "--gpu" otherwise.

    Example: parse_arch("8.6") == "sm_86". PTX names (compute_90) are refused: a GPU has an sm, not a PTX.
    """
    cleaned = text.strip().lower()
    for form in _ARCH_FORMS:
        match = form.fullmatch(cleaned)
        if match:
            return dl_stack.arch_name((int(match["major"]), int(match["minor"])))
    raise InputError([Problem("--gpu", f"{text!r} is not a GPU architecture", "e.g. sm_90 or 9.0")])


def parse_driver(text: str) -> str:
    """An NVIDIA driver version such as "535.104.05" or "535.104"; InputError on "--driver" otherwise."""
    cleaned = text.strip()
    if not _DRIVER.fullmatch(cleaned):
        raise InputError([Problem("--driver", f"{text!r} is not an NVIDIA driver version", "e.g. 535.104.05")])
    return cleaned


def node_from_flags(gpu: str | None, driver: str | None, probe: Callable[[], Node]) -> Node:
    """The node to judge: this host (`probe()`) without flags, else a "given" node built from both flags.

    `gpu` may list several GPUs, comma-separated ("sm_80,sm_90"). Giving only one of the two flags is an
    InputError naming the missing one: mixing a given GPU with this host's driver would describe no real node.
    """
    if gpu is None and driver is None:
        return probe()
    problems: list[Problem] = []
    gpus: list[Gpu] = []
    if gpu is None:
        problems.append(Problem("--gpu", "is needed with --driver: the node to judge has both", "e.g. sm_90 or 9.0"))
    else:
        entries = [entry.strip() for entry in gpu.split(",")]
        for index, entry in enumerate(entries):
            try:
                gpus.append(Gpu(f"GPU {index}", parse_arch(entry)))
            except InputError as error:
                problems += error.problems
    parsed_driver: str | None = None
    if driver is None:
        problems.append(Problem("--driver", "is needed with --gpu: the node to judge has both", "e.g. 535.104.05"))
    else:
        try:
            parsed_driver = parse_driver(driver)
        except InputError as error:
            problems += error.problems
    if problems:
        raise InputError(problems)
    return Node(driver=parsed_driver, gpus=tuple(gpus), container_runtime=None, source="given")


# --- deciding ------------------------------------------------------------------------------------------


def _driver_key(version: str) -> tuple[int, int, int]:
    parts = [int(part) for part in version.split(".")]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def kernels_for(cell: Cell, arch: str) -> str | None:
    """How the cell's framework runs on a GPU of `arch` (sm_XY): "sass sm_XY", "ptx compute_XY (JIT)", or None.

    The rule is the payload's `dl_stack.kernel_for_capability`, the one dl-smoke checks inside the image: SASS
    (cubin) runs on GPUs of the same major architecture with an equal or higher minor; PTX is JIT-compiled by
    the driver for any GPU at or above its architecture. The best fit is named: the newest compatible SASS, else
    the newest usable PTX.
    Example: an sm_80-only build on an A10 (sm_86) -> "sass sm_80"; TensorFlow's compute_80 on an H100 ->
    "ptx compute_80 (JIT)".
    """
    gpu = dl_stack.parse_arch(arch)
    if gpu is None:
        raise ValueError(f"{arch!r} is not a GPU architecture; parse_arch() makes one")
    kernel = dl_stack.kernel_for_capability((gpu.major, gpu.minor), _arch_list(cell))
    if kernel is None:
        return None
    return f"ptx {kernel} (JIT)" if kernel.startswith("compute_") else f"sass {kernel}"


def _arch_list(cell: Cell) -> list[str]:
    """The build's arch list as the framework reports it: the matrix's PTX targets sm_XY become compute_XY."""
    return [*cell.arch_sass, *(f"compute_{arch.removeprefix('sm_')}" for arch in cell.arch_ptx)]


def verdict(cell: Cell, node: Node) -> Verdict:
    """Whether the cell's image runs on the node, with every reason it does not and caveats when it does."""
    reasons: list[str] = []
    notes: list[str] = []
    driver = node.driver
    below_min = False
    if driver is None:
        reasons.append(NO_DRIVER)
    else:
        if not node.gpus:
            reasons.append(NO_GPU)
        if _driver_key(driver) < _driver_key(cell.compat_driver):
            below_min = True
            reasons.append(
                f"driver {driver} is older than {cell.compat_driver}, the oldest that can run CUDA {cell.cuda} "
                "even under minor-version compatibility"
            )
        elif _driver_key(driver) < _driver_key(cell.min_driver):
            below_min = True
            reasons.append(_below_min_reason(cell, driver))
            notes.append(_compat_note(cell))
    for index, gpu in enumerate(node.gpus):
        label = gpu.name or f"GPU {index}"
        if gpu.arch is None:
            reasons.append(
                f"compute capability unknown for {label}: nvidia-smi has no compute_cap field and pynvml is "
                "not installed; pass --gpu and --driver to judge it"
            )
            continue
        kernels = kernels_for(cell, gpu.arch)
        if kernels is None:
            reasons.append(f"no kernels for {gpu.arch} ({label}) in this build: it has {', '.join(_arch_list(cell))}")
        elif kernels.startswith("ptx"):
            notes.append(
                f"{gpu.arch} ({label}) runs {kernels}: the driver compiles kernels on first use, so the first "
                f"start is slow (minutes; cached after); needs driver >= {cell.min_driver}"
            )
            if below_min:
                reasons.append(f"PTX JIT needs driver >= {cell.min_driver} (CUDA {cell.cuda}'s own driver)")
    if node.container_runtime is False:
        reasons.append(RUNTIME_MISSING)
    elif node.container_runtime is None:
        notes.append("container runtime not checked")
    unique_reasons = tuple(dict.fromkeys(reasons))
    return Verdict(runs=not unique_reasons, reasons=unique_reasons, notes=tuple(dict.fromkeys(notes)))


def _below_min_reason(cell: Cell, driver: str) -> str:
    if cell.cuda_source == "wheel":
        how = (
            f'the image sets NVIDIA_REQUIRE_CUDA="cuda>={cell.cuda}", '
            "so the NVIDIA container toolkit refuses to start it"
        )
    else:
        how = f"the {cell.base_image} base's NVIDIA_REQUIRE_CUDA refuses it outside its driver-branch exceptions"
    return f"driver {driver} is below {cell.min_driver}, the driver CUDA {cell.cuda} needs: {how}"


def _compat_note(cell: Cell) -> str:
    if cell.cuda_source == "wheel":
        return (
            f"minor-version compatibility could run it from driver {cell.compat_driver} with "
            "NVIDIA_DISABLE_REQUIRE=1 (docker run -e NVIDIA_DISABLE_REQUIRE=1), without PTX JIT and without "
            f"features newer than the driver"
        )
    return (
        "nvidia/cuda's forward-compatibility exceptions (brand=tesla driver branches such as 450/470/525, with "
        "the cuda-compat libraries in the base) may allow data-center GPUs; GeForce/RTX GPUs are refused"
    )


def report(cells: Iterable[Cell], node: Node) -> list[dict[str, object]]:
    """One JSON object per cell: the cell's fields exactly as `invoke matrix --json` has them, plus
    "runs" (bool), "reasons" (list of str, empty when it runs) and "run_notes" (list of str).

    The doctor's notes go under "run_notes" because the cell's own "notes" key is part of `as_json()`.
    """
    rows: list[dict[str, object]] = []
    for cell in cells:
        judged = verdict(cell, node)
        rows.append(
            {**cell.as_json(), "runs": judged.runs, "reasons": list(judged.reasons), "run_notes": list(judged.notes)}
        )
    return rows


def describe_node(node: Node) -> str:
    """One line: where the facts come from, driver, GPUs (grouped, with archs) and container runtime."""
    counts: dict[Gpu, int] = {}
    for gpu in node.gpus:
        counts[gpu] = counts.get(gpu, 0) + 1
    gpus = ", ".join(
        f"{n}x {gpu.name} ({gpu.arch or 'arch unknown'})" if n > 1 else f"{gpu.name} ({gpu.arch or 'arch unknown'})"
        for gpu, n in counts.items()
    )
    runtime = {True: "configured", False: "not configured", None: "not checked"}[node.container_runtime]
    return (
        f"node ({node.source}): driver {node.driver or 'none found'}; GPUs: {gpus or 'none'}; "
        f"NVIDIA container runtime: {runtime}"
    )


def _strings(row: dict[str, object], key: str) -> list[str]:
    value = row.get(key, [])
    return [str(item) for item in value] if isinstance(value, list) else []


def format_report(rows: Sequence[dict[str, object]], node: Node) -> str:
    """The report for people: the node, then RUNS / NO per image with its reasons and notes.

    Reasons and notes shared by every image are said once under the node line instead of on every image.
    """
    every_reason = _common(rows, "reasons")
    every_note = _common(rows, "run_notes")
    runs = sum(1 for row in rows if row["runs"] is True)
    lines = [describe_node(node)]
    lines += [f"  every image: {reason}" for reason in every_reason]
    lines += [f"  every image, note: {note}" for note in every_note]
    lines.append(f"{runs} of {len(rows)} images run on this node.")
    lines.append("")
    for row in rows:
        tags = _strings(row, "tags")
        ref = f"{row['image']}:{tags[0] if tags else '?'}"
        lines.append(f"{'RUNS' if row['runs'] is True else 'NO':<5} {ref}")
        lines += [f"        - {reason}" for reason in _strings(row, "reasons") if reason not in every_reason]
        lines += [f"        note: {note}" for note in _strings(row, "run_notes") if note not in every_note]
    return "\n".join(lines)


def _common(rows: Sequence[dict[str, object]], key: str) -> list[str]:
    if len(rows) < 2:
        return []
    first = _strings(rows[0], key)
    return [item for item in first if all(item in _strings(row, key) for row in rows[1:])]


# --- probing this host (side effects) ------------------------------------------------------------------


def probe_host(
    runner: Runner = DEFAULT,
    *,
    nvml_capabilities: Callable[[], list[tuple[int, int]] | None] | None = None,
    cdi_dirs: Sequence[Path] = CDI_DIRS,
    which: Callable[[str], str | None] = shutil.which,
) -> Node:
    """This host as a Node: driver and GPUs from nvidia-smi, container runtime from Docker and CDI specs.

    nvidia-smi older than ~510 has no compute_cap field: then the GPUs' archs come from pynvml when it is
    installed, else stay unknown. Nothing here raises for a missing tool: it becomes a fact of the node.
    """
    driver, gpus = probe_gpus(runner, nvml_capabilities or _nvml_capabilities)
    runtime = probe_container_runtime(runner, cdi_dirs=cdi_dirs, which=which)
    return Node(driver=driver, gpus=gpus, container_runtime=runtime, source="this host")


def _stdout(runner: Runner, argv: list[str], timeout: float) -> str | None:
    """stdout of a successful command; None when it is missing, fails or hangs."""
    done = runner(argv, timeout=timeout)
    return done.out if done.ok else None


def probe_gpus(
    runner: Runner, nvml_capabilities: Callable[[], list[tuple[int, int]] | None]
) -> tuple[str | None, tuple[Gpu, ...]]:
    """(driver, GPUs) from nvidia-smi; (None, ()) when nvidia-smi is missing or cannot talk to a driver."""
    query = ["nvidia-smi", "--format=csv,noheader"]
    out = _stdout(runner, [*query, "--query-gpu=name,compute_cap,driver_version"], NVIDIA_SMI_TIMEOUT_S)
    if out is not None:
        fields = [parts for parts in (line.rsplit(",", 2) for line in out.splitlines()) if len(parts) == 3]
        rows = [(name.strip(), _arch_or_none(cap), version.strip()) for name, cap, version in fields]
    else:
        # Older nvidia-smi refuses the whole query for the unknown compute_cap field.
        out = _stdout(runner, [*query, "--query-gpu=name,driver_version"], NVIDIA_SMI_TIMEOUT_S)
        if out is None:
            return None, ()
        pairs = [parts for parts in (line.rsplit(",", 1) for line in out.splitlines()) if len(parts) == 2]
        capabilities = nvml_capabilities() or []
        archs: list[str | None] = (
            [_arch_or_none(f"{major}.{minor}") for major, minor in capabilities]
            if len(capabilities) == len(pairs)
            else [None] * len(pairs)
        )
        rows = [(name.strip(), arch, version.strip()) for (name, version), arch in zip(pairs, archs, strict=True)]
    if not rows:
        return None, ()
    driver = rows[0][2]
    try:
        driver = parse_driver(driver)
    except InputError:
        return None, ()
    return driver, tuple(Gpu(name, arch) for name, arch, _ in rows)


def _arch_or_none(text: str) -> str | None:
    try:
        return parse_arch(text)
    except InputError:  # "[N/A]" and the like
        return None


def _nvml_capabilities() -> list[tuple[int, int]] | None:
    """Every GPU's compute capability through NVML, or None without pynvml or a working driver."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]
            return [(int(cap[0]), int(cap[1])) for cap in (nvml.nvmlDeviceGetCudaComputeCapability(h) for h in handles)]
        finally:
            nvml.nvmlShutdown()
    except Exception:  # pynvml raises its own NVMLError subclasses; any failure means "unknown"
        return None


def probe_container_runtime(
    runner: Runner, *, cdi_dirs: Sequence[Path] = CDI_DIRS, which: Callable[[str], str | None] = shutil.which
) -> bool | None:
    """True when Docker can hand GPUs to containers, False when it cannot, None when Docker does not answer.

    Docker can do it through the nvidia runtime registered in daemon.json, through `--gpus` with the
    toolkit's nvidia-container-runtime-hook on PATH, or through a CDI spec (`--device nvidia.com/gpu=all`).
    """
    out = _stdout(runner, ["docker", "info", "--format", "{{json .Runtimes}}"], DOCKER_TIMEOUT_S)
    if out is None:
        return None
    try:
        runtimes = json.loads(out)
    except json.JSONDecodeError:
        runtimes = {}
    if isinstance(runtimes, dict) and any("nvidia" in name for name in runtimes):
        return True
    if which("nvidia-container-runtime-hook") is not None:
        return True
    return any(
        path.is_file()
        for folder in cdi_dirs
        if folder.is_dir()
        for path in (*folder.glob("nvidia*.yaml"), *folder.glob("nvidia*.json"))
    )
