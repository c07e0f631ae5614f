"""The GPU-node doctor: which images of the matrix will run on a GPU node, how, and why not.

Pure functions decide (`kernels_for`, `verdict`, `report`) from a `gpunode.Node`, given by flags or probed on this
host by `dlimages.gpu.probe`; the driver part is each cell's `compat.DriverRule`, the rule the image's
NVIDIA_REQUIRE_CUDA and labels come from, with the base's cuda-compat libraries as the node's container toolkit
treats them (model/toolkit). `doctor_text` lays the report out for people.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dlimages.model import architectures, branches, compat, gpumodels, toolkit
from dlimages.model.cells import Cell
from dlimages.model.compat import DriverFit
from dlimages.model.gpunode import Gpu, Node, data_center_brand
from dlimages.model.requirecuda import driver_key
from dlimages.payload import dl_stack

RUNTIME_MISSING = (
    "the NVIDIA container runtime is not configured for Docker "
    "(no nvidia runtime in `docker info`, no nvidia-container-runtime-hook for --gpus, no CDI spec)"
)
NO_TOOLKIT = (
    "this node has no NVIDIA container toolkit (--toolkit none): no container gets its GPUs "
    "(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html)"
)
NO_DRIVER = "no NVIDIA driver found (nvidia-smi missing or failing)"
NO_GPU = "no NVIDIA GPU visible"
CPU_SOURCE = f"GH200, GB200 and GB300 hosts have NVIDIA's Arm CPU, Grace: {gpumodels.ARM_HOSTS}"
# The brand a GPU of unknown brand is judged as: one the bases name, without forward compatibility.
NOT_DATA_CENTER = "geforce"
# Compute capabilities only data-center GPUs have (A100/A30; H100/H200/GH200): no GeForce, RTX or TITAN part is sm_80
# or sm_90 (https://developer.nvidia.com/cuda-gpus), so one of unknown brand is judged data-center.
DATA_CENTER_ONLY_ARCHS = ("sm_80", "sm_90")
# The order in which one way of running is more conditional than another, for a node whose GPUs differ.
PATHS = (compat.TOOLKIT_DRIVER, compat.MINOR_VERSION, compat.FORWARD_COMPAT)


@dataclass(frozen=True)
class Verdict:
    runs: bool
    reasons: tuple[str, ...]  # why it does not run; empty when it runs
    notes: tuple[str, ...]  # caveats that do not stop it (slow first start, nothing checked, conditions)
    runs_through: str | None = None  # compat.TOOLKIT_DRIVER, MINOR_VERSION or FORWARD_COMPAT; None: does not run
    needs_driver: str | None = None  # where the driver stops it: the oldest driver that runs it on these GPUs


# Pulling zstd-compressed layers (`invoke push --compression zstd`) came with Docker 23.0
# (https://github.com/moby/moby/releases/tag/v23.0.0, moby/moby#41759).
ZSTD_MIN_DOCKER = 23
ZSTD_NOTE = (
    "this node's Docker {engine} cannot pull images pushed with --compression zstd (Docker 23.0 or later can): "
    "pull the ones pushed with gzip, the default"
)

# --- deciding ------------------------------------------------------------------------------------------


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
    kernel = dl_stack.kernel_for_capability((gpu.major, gpu.minor), cell.arch_list)
    if kernel is None:
        return None
    return f"ptx {kernel} (JIT)" if kernel.startswith("compute_") else f"sass {kernel}"


def _capability(arch: str) -> str:
    """sm_86 -> "8.6", the form the container toolkit compares `arch` conditions with."""
    entry = dl_stack.parse_arch(arch)
    assert entry is not None  # parse_arch() made it
    return f"{entry.major}.{entry.minor}"


def verdict(cell: Cell, node: Node) -> Verdict:
    """Whether the cell's image runs on the node, how, every reason it does not, and caveats when it does."""
    reasons: list[str] = []
    notes: list[str] = []
    paths: list[str] = []
    needs: list[str] = []
    driver = node.driver
    if driver is None:
        reasons.append(NO_DRIVER)
    elif not node.gpus:
        reasons.append(NO_GPU)
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
            dropped = architectures.dropped_by(gpu.arch, cell.cuda)
            reasons.append(
                f"no kernels for {gpu.arch} ({label}) in this build: it has {', '.join(cell.arch_list)}"
                + (f"; {dropped}" if dropped else "")
            )
            continue
        if driver is not None:
            judged = _judge_driver(cell, node, driver, gpu, label, kernels)
            notes += judged.notes
            if judged.path is None:
                reasons.append(judged.said)
                needs += [judged.needs] if judged.needs else []
                continue
            paths.append(judged.path)
            notes += [judged.said] if judged.said else []
        if kernels.startswith("ptx"):
            notes.append(
                f"{gpu.arch} ({label}) runs {kernels}: the driver compiles kernels on first use, so the first "
                "start is slow (minutes; cached after)"
            )
    archs = [gpu.arch for gpu in node.gpus]
    notes += [f"{c.text} ({c.source})" for c in cell.caveats if driver is not None and c.concerns(driver, archs)]
    if node.branch is not None and (branch := branches.BY_NUMBER.get(node.branch)) is not None:
        notes.append(branches.judged_at(branch))
    if node.cpu not in (None, "amd64"):
        reasons.append(f"this node's CPU is {node.cpu} ({CPU_SOURCE}): the images are built for linux/amd64 only")
    if node.toolkit == toolkit.NONE:
        reasons.append(NO_TOOLKIT)
    elif node.container_runtime is False:
        reasons.append(RUNTIME_MISSING)
    elif node.container_runtime is None:
        notes.append("container runtime not checked")
    unique_reasons = tuple(dict.fromkeys(reasons))
    runs = not unique_reasons
    return Verdict(
        runs=runs,
        reasons=unique_reasons,
        notes=tuple(dict.fromkeys(notes)),
        runs_through=max(paths, key=PATHS.index) if runs and paths else None,
        needs_driver=max(needs, key=driver_key) if needs else None,
    )


@dataclass(frozen=True)
class OnGpu:
    """How a node's driver runs a cell on one GPU: the way (None: it does not), the note on that way or the reason it
    does not, the driver that would run it there, and further notes."""

    path: str | None
    said: str
    needs: str | None = None
    notes: tuple[str, ...] = ()


def _judge_driver(cell: Cell, node: Node, driver: str, gpu: Gpu, label: str, kernels: str) -> OnGpu:
    """How the driver runs the cell on one GPU, with the base's cuda-compat libraries as the node's toolkit treats them.

    A GPU of unknown brand is judged as one that is not data-center (but sm_80 and sm_90, which only data-center GPUs
    are), with a note where a data-center GPU differs.
    """
    brand = gpu.brand or (data_center_brand(driver) if gpu.arch in DATA_CENTER_ONLY_ARCHS else NOT_DATA_CENTER)
    judged = _on_gpu(cell, node, driver, gpu, label, kernels, brand)
    if gpu.brand is None:
        data_center = _on_gpu(cell, node, driver, gpu, label, kernels, data_center_brand(driver))
        if data_center.path != judged.path and data_center.path is not None:
            said = (
                f"{label}'s brand is not known, so it is judged as a GPU that is not data-center; on a data-center "
                f"GPU (--brand tesla or nvidia) it runs through {data_center.path}"
            )
            judged = dataclasses.replace(judged, notes=(said, *judged.notes))
    return judged


def _on_gpu(cell: Cell, node: Node, driver: str, gpu: Gpu, label: str, kernels: str, brand: str) -> OnGpu:
    """One GPU of one brand: judged with the base's cuda-compat libraries loaded and without (on the host's driver
    alone), and the two put together as the node's container toolkit loads them, on each way of asking for GPUs."""
    rule = cell.driver

    def fit(compat_libs: bool) -> DriverFit:
        jit = kernels.startswith("ptx")
        return rule.fit(driver, brand=brand, arch=_capability(gpu.arch or ""), needs_jit=jit, compat_libs=compat_libs)

    def said(judged: DriverFit, *, alone: bool = False) -> str:
        return _explain(cell, driver, gpu, label, kernels, brand, judged, alone=alone)

    loaded, alone = fit(True), fit(False)
    if loaded == alone:  # no cuda-compat here (wheels, a driver of the base's own branch, a refused requirement)
        return OnGpu(loaded.path, said(loaded), loaded.needs)
    libraries = toolkit.compat_libraries(node.toolkit)
    host = f"CUDA runs on the host's driver alone ({toolkit.HOST_ALONE})"
    if libraries.with_gpus == libraries.with_runtime:
        if libraries.loads:
            return OnGpu(loaded.path, said(loaded), loaded.needs, (libraries.condition,))
        return OnGpu(alone.path, f"{libraries.condition}, so {host}: {said(alone, alone=True)}", alone.needs)
    # Toolkit 1.17.5 and 1.17.6: --runtime=nvidia and CDI load them, plain --gpus does not.
    gpus_only = f"with plain --gpus, {host}: {said(alone, alone=True)}"
    if loaded.path is not None:
        return OnGpu(loaded.path, said(loaded), None, (libraries.condition, gpus_only))
    if alone.path is not None:
        notes = (libraries.condition, f"with --runtime=nvidia or CDI it does not run: {said(loaded)}")
        return OnGpu(alone.path, f"only with plain --gpus, where {host}: {said(alone, alone=True)}", None, notes)
    needs = min((n for n in (loaded.needs, alone.needs) if n), key=driver_key, default=None)
    return OnGpu(None, f"{said(loaded)}; {libraries.condition}, and {gpus_only}", needs)


def _explain(
    cell: Cell, driver: str, gpu: Gpu, label: str, kernels: str, brand: str, fit: DriverFit, *, alone: bool = False
) -> str:
    """The note on how the driver runs the cell on one GPU, or the reason it does not, naming the needed driver;
    `alone`: an nvidia/cuda base's CUDA on the host's driver alone, its cuda-compat libraries not loaded."""
    rule = cell.driver
    floor = (rule.minor_floor or rule.toolkit_driver) if alone else rule.compat_driver
    own = f"driver {driver} is below CUDA {cell.cuda}'s own {rule.toolkit_driver}"
    who = f"{gpu.arch} ({label}, {brand if gpu.brand else 'brand unknown'})"
    kind = brand if gpu.brand else "non-data-center"
    branch = str(driver_key(driver)[0])
    if fit.path == compat.MINOR_VERSION:
        how = f"the build has machine code for this GPU ({kernels}): no PTX JIT needed"
        if kernels.startswith("ptx"):
            how = f"its PTX ({kernels}) is of a CUDA release this driver JIT-compiles (from {rule.jit_driver})"
        return (
            f"{compat.MINOR_VERSION} on {who}: {own} but at least {floor}, and {how}; CUDA features "
            "newer than the driver are unavailable"
        )
    if fit.path == compat.FORWARD_COMPAT:
        return (
            f"{compat.FORWARD_COMPAT} on {who}: {own}; the image admits {kind} GPUs on branch {branch}, where CUDA "
            f"runs on the base's cuda-compat ({rule.cuda_compat}) libraries if the container toolkit loads them; they "
            "run on data-center GPUs only (other brands fail with CUDA error 804)"
        )
    if fit.path is not None:
        return ""
    needs = f"needs driver >= {fit.needs}"
    if fit.cause == compat.BELOW_COMPAT_FLOOR:
        no_compat = (
            " (this image has no cuda-compat package, so forward compatibility does not apply)"
            if rule.cuda_compat is None and (gpu.brand is None or brand in compat.DATA_CENTER_BRANDS)
            else ""
        )
        if floor == rule.toolkit_driver:
            return (
                f"driver {driver} is older than {rule.toolkit_driver}, the driver CUDA {cell.cuda} needs{no_compat}; "
                f"{needs}"
            )
        return (
            f"driver {driver} is older than {floor}, the oldest that can run CUDA {cell.cuda} even under "
            f"minor-version compatibility{no_compat}; {needs}"
        )
    if fit.cause == compat.NEEDS_JIT:
        refused = (  # the arch< clauses of NVIDIA_REQUIRE_CUDA are ours, on wheel images only (wheel_require_cuda)
            f"; the image's NVIDIA_REQUIRE_CUDA refuses such GPUs below its own driver (arch<{rule.jit_from})"
            if rule.jit_from and rule.cuda_compat is None
            else ""
        )
        if fit.needs != rule.toolkit_driver:
            return f"{who} runs {kernels}, whose PTX this driver cannot JIT-compile: {own}; {needs}"
        return f"{who} runs {kernels}, and minor-version compatibility has no PTX JIT: {own}{refused}; {needs}"
    if fit.cause == compat.COMPAT_NOT_ON_BRAND:
        return (
            f"{own}; the image admits {kind} GPUs on branch {branch}, but there the container toolkit loads the "
            f"base's cuda-compat ({rule.cuda_compat}) libraries, which run on data-center GPUs only: on {who} CUDA "
            f"fails with error 804 (forward compatibility was attempted on non supported HW); {needs}"
        )
    admitted = admitted_branches(rule.require_cuda)
    return (
        f"{own}, and the image's NVIDIA_REQUIRE_CUDA (nvidia/cuda's) admits older drivers only on branch "
        f"{admitted or 'none'}: the NVIDIA container toolkit refuses to start it on {who} with --gpus "
        f"({toolkit.NOT_CHECKED_ON_CDI}); {needs}"
    )


# Every brand NVIDIA's bases list when they admit a branch for any GPU.
_LISTED_BRANDS = {"tesla", "unknown", "nvidia", "nvidiartx", "geforce", "geforcertx", "quadro", "quadrortx", "titan"}


def admitted_branches(require_cuda: str) -> str:
    """The older driver branches an NVIDIA_REQUIRE_CUDA admits and for which brands, for people to read.

    Example: "cuda>=11.8 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471" -> "450 (tesla),
    470 (tesla)"; a branch listed for every brand NVIDIA names reads "470 (any brand)".
    """
    branches: dict[int, list[str]] = {}
    for brand, branch in compat.BRANCH_CLAUSE.findall(require_cuda):
        branches.setdefault(int(branch), []).append(brand)
    return ", ".join(
        f"{branch} ({'any brand' if _LISTED_BRANDS <= set(brands) else ', '.join(brands)})"
        for branch, brands in sorted(branches.items())
    )


def report(cells: Iterable[Cell], node: Node) -> list[dict[str, object]]:
    """One JSON object per cell: the cell's fields exactly as `invoke matrix --json` has them, plus
    "runs" (bool), "runs_through" (how: "toolkit driver", "minor-version compatibility", "forward compatibility";
    null when it does not run), "reasons" (list of str, empty when it runs), "needs_driver" (the oldest driver that
    runs it on these GPUs, when the driver is a reason; else null), "run_notes" (list of str), "condition" (the
    verdict as a code: `condition`) and "sources" (the URLs its reasons and notes cite).

    The doctor's notes go under "run_notes" because the cell's own "notes" key is part of `as_json()`.
    """
    major = (dl_stack.parse_version(node.engine) or (0,))[0]
    old_engine = [ZSTD_NOTE.format(engine=node.engine)] if node.engine and major < ZSTD_MIN_DOCKER else []
    rows: list[dict[str, object]] = []
    for cell in cells:
        judged = verdict(cell, node)
        rows.append(
            {
                **cell.as_json(),
                "runs": judged.runs,
                "runs_through": judged.runs_through,
                "reasons": list(judged.reasons),
                "needs_driver": judged.needs_driver,
                "run_notes": [*judged.notes, *old_engine],
                "condition": condition(judged),
                "sources": cited(judged.reasons + judged.notes),
            }
        )
    return rows


_URL = re.compile(r"https?://[^\s)\]]+")


def cited(texts: Iterable[str]) -> list[str]:
    """The URLs these reasons and notes cite, sorted, without the punctuation that follows them in a sentence."""
    return sorted({url.rstrip(".,;:") for text in texts for url in _URL.findall(text)})


_CAUSES: tuple[tuple[str, str], ...] = (("this node's CPU is", "cpu-architecture"), (NO_DRIVER, "no-driver"))
_CAUSES += ((NO_GPU, "no-gpu"), (RUNTIME_MISSING, "no-container-runtime"), (NO_TOOLKIT, "no-container-runtime"))
_CAUSES += (("no kernels for", "no-kernels"),)


def condition(judged: Verdict) -> str:
    """The verdict for machines: how it runs ("toolkit-driver", "minor-version-compatibility",
    "forward-compatibility"), or what stops it, the most basic first ("cpu-architecture", "no-driver", "no-gpu",
    "no-container-runtime", "no-kernels", "driver>=X"; "other" for the rest)."""
    if judged.runs:
        return (judged.runs_through or compat.TOOLKIT_DRIVER).replace(" ", "-")
    for start, code in _CAUSES:
        if any(reason.startswith(start) for reason in judged.reasons):
            return code
    return f"driver>={judged.needs_driver}" if judged.needs_driver else "other"
