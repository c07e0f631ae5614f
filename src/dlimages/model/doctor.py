"""The GPU-node doctor: which images of the matrix will run on a GPU node, how, and why not.

Pure functions decide (`kernels_for`, `verdict`, `report`) from a `Node`, given by flags or probed
on this host by `dlimages.gpu.probe`; the driver part is each cell's `compat.DriverRule`, the rule the image's
NVIDIA_REQUIRE_CUDA and labels come from. `doctor_text` lays the report out for people.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dlimages.core.errors import InputError, Problem
from dlimages.model import compat, gpumodels, toolkit
from dlimages.model.cells import Cell
from dlimages.model.compat import DriverFit, driver_key
from dlimages.payload import dl_stack

RUNTIME_MISSING = (
    "the NVIDIA container runtime is not configured for Docker "
    "(no nvidia runtime in `docker info`, no nvidia-container-runtime-hook for --gpus, no CDI spec)"
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
class Gpu:
    name: str
    arch: str | None  # "sm_90"; None when the probe could not read the compute capability
    brand: str | None = None  # as the NVIDIA container toolkit names it (compat.NVML_BRANDS); None: not known


@dataclass(frozen=True)
class Node:
    """What the doctor knows about a GPU node, probed on this host or given by flags."""

    driver: str | None  # None: no working NVIDIA driver found
    gpus: tuple[Gpu, ...]
    container_runtime: bool | None  # None: not checked (Docker not reachable, or a node given by flags)
    source: str  # "this host" or "given"
    toolkit: str | None = None  # the NVIDIA container toolkit's version ("1.17.8"); None: not known
    engine: str | None = None  # the Docker engine's version ("26.1.5"); None: not known
    cpu: str | None = None  # the host's CPU as Docker names platforms ("amd64", "arm64"); None: not known


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

# --- parsing user input ------------------------------------------------------------------------------------

_ARCH_FORMS = (
    re.compile(r"sm_(?P<major>[1-9][0-9]?)(?P<minor>[0-9])"),  # sm_90, sm_100
    re.compile(r"(?P<major>[1-9][0-9]?)\.(?P<minor>[0-9])"),  # 9.0, 10.0 (nvidia-smi's compute_cap)
    re.compile(r"(?P<major>[1-9][0-9]?)(?P<minor>[0-9])"),  # 90, 100
)
# ASCII digits only: Python's \d also matches other scripts' digits, which no driver version has.
_DRIVER = re.compile(r"[0-9]{3,4}\.[0-9]{1,3}(\.[0-9]{1,3})?")
BRAND_HELP = "tesla or nvidia (data-center GPUs), or " + ", ".join(
    brand for brand in compat.NVML_BRANDS.values() if brand not in compat.DATA_CENTER_BRANDS
)


def parse_arch(text: str) -> str:
    """A GPU architecture as sm_XY, from "sm_90", "9.0" or "90"; InputError on "--gpu" otherwise.

    Example: parse_arch("8.6") == "sm_86". PTX names (compute_90) are refused: a GPU has an sm, not a PTX.
    """
    cleaned = text.strip().lower()
    for form in _ARCH_FORMS:
        match = form.fullmatch(cleaned)
        if match:
            return dl_stack.arch_name((int(match["major"]), int(match["minor"])))
    raise InputError([Problem("--gpu", f"{text!r} is no GPU model or architecture", f"{gpumodels.EXAMPLES}; sm_90")])


def parse_driver(text: str) -> str:
    """An NVIDIA driver version such as "535.104.05" or "535.104"; InputError on "--driver" otherwise."""
    cleaned = text.strip()
    if not _DRIVER.fullmatch(cleaned):
        raise InputError([Problem("--driver", f"{text!r} is not an NVIDIA driver version", "e.g. 535.104.05")])
    return cleaned


def parse_brand(text: str) -> tuple[str, ...]:
    """GPU brands as the NVIDIA container toolkit names them, comma-separated, any case; InputError on "--brand".

    Example: parse_brand("Tesla") == ("tesla",); parse_brand("tesla,geforce") == ("tesla", "geforce").
    """
    brands = tuple(entry.strip().lower() for entry in text.split(","))
    bad = [brand for brand in brands if brand not in compat.NVML_BRANDS.values()]
    if bad:
        raise InputError(
            Problem("--brand", f"{brand!r} is not a GPU brand the NVIDIA container toolkit knows", BRAND_HELP)
            for brand in bad
        )
    return brands


def node_from_flags(
    gpu: str | None, driver: str | None, probe: Callable[[], Node], brand: str | None = None, kit: str | None = None
) -> Node:
    """The node to judge: this host (`probe()`) without --gpu/--driver, else a "given" node built from both flags.

    `gpu` may list several GPUs, comma-separated ("sm_80,sm_90"); `brand` one brand for all of them or one each
    ("tesla"; "tesla,geforce"), and on this host it replaces the brand the probe read. Giving only one of --gpu and
    --driver is an InputError naming the missing one: mixing a given GPU with this host's driver would describe no
    real node. `kit`, the container toolkit's version, replaces what the probe read.
    """
    problems: list[Problem] = []
    brands: tuple[str, ...] = ()
    given_kit: str | None = None
    if brand is not None:
        try:
            brands = parse_brand(brand)
        except InputError as error:
            problems += error.problems
    no_kit = kit is not None and kit.strip().lower() == toolkit.NONE  # no container toolkit: no GPU container starts
    if kit is not None and not no_kit:
        try:
            given_kit = toolkit.parse_toolkit(kit)
        except InputError as error:
            problems += error.problems
    if gpu is None and driver is None:
        if problems:
            raise InputError(problems)
        node = probe()
        node = dataclasses.replace(node, toolkit=given_kit) if given_kit else node
        node = dataclasses.replace(node, toolkit=None, container_runtime=False) if no_kit else node
        if brands and node.gpus:
            node = _with_brands(node, brands, problems)
        if problems:
            raise InputError(problems)
        return node
    gpus: list[Gpu] = []
    if gpu is None:
        problems.append(Problem("--gpu", "is needed with --driver: the node to judge has both", "e.g. sm_90 or 9.0"))
    else:
        entries = [entry.strip() for entry in gpu.split(",")]
        for index, entry in enumerate(entries):
            model = gpumodels.find(entry)
            if model is not None:
                gpus.append(Gpu(model.name, model.arch))
                continue
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
    hosts = {m.host_arch for m in map(gpumodels.find, (g.name for g in gpus)) if m is not None and m.host_arch}
    runtime = False if no_kit else None
    node = Node(parsed_driver, tuple(gpus), runtime, "given", given_kit, cpu=next(iter(sorted(hosts)), None))
    if parsed_driver is not None and not brands:  # a model's name says its brand
        node = dataclasses.replace(node, gpus=tuple(_named_brand(g, parsed_driver) for g in node.gpus))
    if brands and gpus and parsed_driver is not None:
        # Tesla and NVIDIA both say data-center; NVML reports the one this driver knows (data_center_brand).
        given = tuple(data_center_brand(parsed_driver) if b in compat.DATA_CENTER_BRANDS else b for b in brands)
        node = _with_brands(node, given, problems)
    if problems:
        raise InputError(problems)
    return node


def _named_brand(gpu: Gpu, driver: str) -> Gpu:
    return dataclasses.replace(gpu, brand=brand_from_name(gpu.name, driver)) if gpumodels.find(gpu.name) else gpu


def _with_brands(node: Node, brands: tuple[str, ...], problems: list[Problem]) -> Node:
    """The node with these brands on its GPUs: one for all, or one each (else a problem, and the node unchanged)."""
    if len(brands) not in (1, len(node.gpus)):
        problems.append(
            Problem("--brand", f"gives {len(brands)} brands for {len(node.gpus)} GPUs", "one brand, or one per GPU")
        )
        return node
    each = brands * len(node.gpus) if len(brands) == 1 else brands
    gpus = tuple(Gpu(g.name, g.arch, b) for g, b in zip(node.gpus, each, strict=True))
    return dataclasses.replace(node, gpus=gpus)


# Data-center GPU models, for a name nvidia-smi gives without a brand (it has no brand field; NVML has).
_DATA_CENTER_NAME = re.compile(
    r"\b(tesla|[abhkl][0-9]{1,3}[a-z]?|gh200|gb[0-9]{2,3}|t4|v100|p100|p40|p4|m60|m40|k80|dgx)\b"
)


def brand_from_name(name: str, driver: str) -> str | None:
    """A GPU's brand as the container toolkit would name it, from the product name alone; None when unsure.

    For hosts without pynvml: nvidia-smi has no brand field. GeForce, TITAN and Quadro names carry their brand
    (with RTX: geforcertx, titanrtx, quadrortx); other RTX names are nvidiartx ("NVIDIA RTX A6000"); Tesla and
    data-center model names ("NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA L4") are tesla on drivers before R460,
    whose NVML has no NVIDIA brand, and nvidia from R460 on. NVIDIA's bases list both brands alike on every branch
    from 460 on, so that choice changes no verdict.
    Example: brand_from_name("NVIDIA GeForce RTX 4090", "535.104.05") == "geforcertx".
    """
    lowered = name.lower()
    rtx = "rtx" in lowered
    for family in ("titan", "geforce", "quadro"):
        if family in lowered:
            return family + ("rtx" if rtx else "")
    if rtx:
        return "nvidiartx"
    if _DATA_CENTER_NAME.search(lowered):
        return data_center_brand(driver)
    return None


def data_center_brand(driver: str) -> str:
    """How NVML names a data-center GPU's brand on this driver: tesla before R460, nvidia since."""
    return "tesla" if driver_key(driver)[0] < 460 else "nvidia"


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
    kernel = dl_stack.kernel_for_capability((gpu.major, gpu.minor), _arch_list(cell))
    if kernel is None:
        return None
    return f"ptx {kernel} (JIT)" if kernel.startswith("compute_") else f"sass {kernel}"


def _arch_list(cell: Cell) -> list[str]:
    """The build's arch list as the framework reports it: the matrix's PTX targets sm_XY become compute_XY."""
    return [*cell.arch_sass, *(f"compute_{arch.removeprefix('sm_')}" for arch in cell.arch_ptx)]


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
            reasons.append(f"no kernels for {gpu.arch} ({label}) in this build: it has {', '.join(_arch_list(cell))}")
            continue
        jit = kernels.startswith("ptx")
        if driver is not None:
            fit, why, also = _judge_driver(cell, driver, gpu, label, kernels)
            notes += also
            if fit.path is None:
                reasons.append(why)
                needs += [fit.needs] if fit.needs else []
                continue
            if fit.path == compat.FORWARD_COMPAT:
                libraries = toolkit.compat_libraries(node.toolkit)
                if not libraries.loads:
                    reasons.append(f"{why}; but {libraries.condition}")
                    needs.append(cell.driver.toolkit_driver)
                    continue
                notes.append(libraries.condition)
            paths.append(fit.path)
            notes += [why] if why else []
        if jit:
            notes.append(
                f"{gpu.arch} ({label}) runs {kernels}: the driver compiles kernels on first use, so the first "
                "start is slow (minutes; cached after)"
            )
    archs = [gpu.arch for gpu in node.gpus]
    notes += [f"{c.text} ({c.source})" for c in cell.caveats if driver is not None and c.concerns(driver, archs)]
    if node.cpu not in (None, "amd64"):
        reasons.append(f"this node's CPU is {node.cpu} ({CPU_SOURCE}): the images are built for linux/amd64 only")
    if node.container_runtime is False:
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


def _judge_driver(cell: Cell, driver: str, gpu: Gpu, label: str, kernels: str) -> tuple[DriverFit, str, list[str]]:
    """How the driver runs the cell on one GPU: the fit, the reason (or the note on how it runs) and extra notes.

    A GPU of unknown brand is judged as one that is not data-center (but sm_80 and sm_90, which only data-center GPUs
    are), with a note where a data-center GPU differs.
    """
    rule = cell.driver
    arch = _capability(gpu.arch or "")
    jit = kernels.startswith("ptx")
    brand = gpu.brand or (data_center_brand(driver) if gpu.arch in DATA_CENTER_ONLY_ARCHS else NOT_DATA_CENTER)
    fit = rule.fit(driver, brand=brand, arch=arch, needs_jit=jit)
    extra: list[str] = []
    if gpu.brand is None:
        data_center = rule.fit(driver, brand=data_center_brand(driver), arch=arch, needs_jit=jit)
        if data_center.path != fit.path and data_center.path is not None:
            extra.append(
                f"{label}'s brand is not known, so it is judged as a GPU that is not data-center; on a data-center "
                f"GPU (--brand tesla or nvidia) it runs through {data_center.path}"
            )
    return fit, _explain(cell, driver, gpu, label, kernels, brand, fit), extra


def _explain(cell: Cell, driver: str, gpu: Gpu, label: str, kernels: str, brand: str, fit: DriverFit) -> str:
    """The note on how the driver runs the cell on one GPU, or the reason it does not, naming the needed driver."""
    rule = cell.driver
    own = f"driver {driver} is below CUDA {cell.cuda}'s own {rule.toolkit_driver}"
    who = f"{gpu.arch} ({label}, {brand if gpu.brand else 'brand unknown'})"
    kind = brand if gpu.brand else "non-data-center"
    branch = str(driver_key(driver)[0])
    if fit.path == compat.MINOR_VERSION:
        how = f"the build has machine code for this GPU ({kernels}): no PTX JIT needed"
        if kernels.startswith("ptx"):
            how = f"its PTX ({kernels}) is of a CUDA release this driver JIT-compiles (from {rule.jit_driver})"
        return (
            f"{compat.MINOR_VERSION} on {who}: {own} but at least {rule.compat_driver}, and {how}; CUDA features "
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
        if rule.compat_driver == rule.toolkit_driver:
            return (
                f"driver {driver} is older than {rule.toolkit_driver}, the driver CUDA {cell.cuda} needs{no_compat}; "
                f"{needs}"
            )
        return (
            f"driver {driver} is older than {rule.compat_driver}, the oldest that can run CUDA {cell.cuda} even under "
            f"minor-version compatibility{no_compat}; {needs}"
        )
    if fit.cause == compat.NEEDS_JIT:
        refused = (
            f"; the image's NVIDIA_REQUIRE_CUDA refuses such GPUs below its own driver (arch<{rule.jit_from})"
            if rule.jit_from
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
    for brand, branch in re.findall(r"brand=([a-z]+),driver>=([0-9]+),driver<[0-9]+", require_cuda):
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
    old_engine = [ZSTD_NOTE.format(engine=node.engine)] if node.engine and _major(node.engine) < ZSTD_MIN_DOCKER else []
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
                "sources": sorted(
                    {url.rstrip(".,;") for text in judged.reasons + judged.notes for url in _URL.findall(text)}
                ),
            }
        )
    return rows


_URL = re.compile(r"https?://[^\s)\]]+")
_CAUSES: tuple[tuple[str, str], ...] = (("this node's CPU is", "cpu-architecture"), (NO_DRIVER, "no-driver"))
_CAUSES += ((NO_GPU, "no-gpu"), (RUNTIME_MISSING, "no-container-runtime"), ("no kernels for", "no-kernels"))


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


def _major(version: str) -> int:
    match = re.match(r"\d+", version)
    return int(match.group()) if match else 0
