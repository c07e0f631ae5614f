"""The doctor's look at this host: its driver, GPUs and their brands from nvidia-smi (and NVML where pynvml is
installed), and whether Docker can hand GPUs to containers. What runs there is decided by `dlimages.model.doctor`."""

from __future__ import annotations

import importlib
import json
import platform
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dlimages.core.errors import InputError
from dlimages.core.runner import DEFAULT, Runner
from dlimages.model import compat, toolkit
from dlimages.model.gpunode import Gpu, Node, brand_from_name, parse_arch, parse_driver

T = TypeVar("T")

NVIDIA_SMI_TIMEOUT_S = 20  # a wedged driver makes nvidia-smi hang rather than fail
DOCKER_TIMEOUT_S = 15
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


def probe_host(
    runner: Runner = DEFAULT,
    *,
    nvml_capabilities: Callable[[], list[tuple[int, int]] | None] | None = None,
    nvml_brands: Callable[[], list[str] | None] | None = None,
    cdi_dirs: Sequence[Path] = CDI_DIRS,
    which: Callable[[str], str | None] = shutil.which,
) -> Node:
    """This host as a Node: driver and GPUs from nvidia-smi, container runtime from Docker and CDI specs.

    nvidia-smi older than ~510 has no compute_cap field: then the GPUs' archs come from pynvml when it is
    installed, else stay unknown. nvidia-smi has no brand field: brands come from pynvml when it is installed,
    else from the GPUs' names (`brand_from_name`). Nothing here raises for a missing tool: it becomes a fact of
    the node.
    """
    driver, gpus = probe_gpus(runner, nvml_capabilities or _nvml_capabilities, nvml_brands or _nvml_brands)
    runtime = probe_container_runtime(runner, cdi_dirs=cdi_dirs, which=which)
    toolkit, engine = probe_toolkit(runner), _stdout(runner, ENGINE_VERSION, DOCKER_TIMEOUT_S)
    cpu = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine() or None)
    engine = engine.strip() if engine and engine.strip() else None
    return Node(driver, gpus, runtime, "this host", toolkit, engine, cpu)


ENGINE_VERSION = ["docker", "version", "--format", "{{.Server.Version}}"]  # the engine, not the client


def probe_toolkit(runner: Runner) -> str | None:
    """The NVIDIA container toolkit's version from its CLIs (`nvidia-ctk`, else `nvidia-container-cli`); None
    when neither is installed or says one."""
    for cli in ("nvidia-ctk", "nvidia-container-cli"):
        out = _stdout(runner, [cli, "--version"], DOCKER_TIMEOUT_S)
        version = toolkit.printed_version(out or "")
        if version is not None:
            return version
    return None


def _stdout(runner: Runner, argv: list[str], timeout: float) -> str | None:
    """stdout of a successful command; None when it is missing, fails or hangs."""
    done = runner(argv, timeout=timeout)
    return done.out if done.ok else None


def probe_gpus(
    runner: Runner,
    nvml_capabilities: Callable[[], list[tuple[int, int]] | None],
    nvml_brands: Callable[[], list[str] | None] = lambda: None,
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
    brands: list[str | None] = list(nvml_brands() or [])
    if len(brands) != len(rows):
        brands = [brand_from_name(name, driver) for name, _, _ in rows]
    return driver, tuple(Gpu(name, arch, brand) for (name, arch, _), brand in zip(rows, brands, strict=True))


def _arch_or_none(text: str) -> str | None:
    try:
        return parse_arch(text)
    except InputError:  # "[N/A]" and the like
        return None


def _nvml_each(read: Callable[[Any, Any], T]) -> list[T] | None:
    """`read(nvml, handle)` for every GPU through NVML, or None without pynvml or a working driver."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        try:
            return [read(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(int(nvml.nvmlDeviceGetCount()))]
        finally:
            nvml.nvmlShutdown()
    except Exception:  # pynvml raises its own NVMLError subclasses; any failure means "unknown"
        return None


def _nvml_capabilities() -> list[tuple[int, int]] | None:
    """Every GPU's compute capability through NVML, or None without pynvml or a working driver."""

    def capability(nvml: Any, handle: Any) -> tuple[int, int]:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)[:2]
        return int(major), int(minor)

    return _nvml_each(capability)


def _nvml_brands() -> list[str] | None:
    """Every GPU's brand through NVML, named as the container toolkit names it; None without pynvml or a driver."""
    return _nvml_each(lambda nvml, handle: compat.NVML_BRANDS.get(int(nvml.nvmlDeviceGetBrand(handle)), "unknown"))


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
