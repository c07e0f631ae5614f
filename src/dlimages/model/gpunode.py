"""A GPU node as the doctor knows it: its driver, its GPUs (compute capability and brand), its container toolkit and
CPU; read from flags (`--gpu H100 --driver R580`), from a fleet file's entry, or probed on this host by
`dlimages.gpu.probe`. Input is checked here, once: a GPU model or architecture, a driver version or a branch this
package knows the first release of (model/branches), a brand NVML names, and a node that can exist (a GPU on a driver
branch that supports it: model/architectures).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dlimages.core.errors import InputError, Problem
from dlimages.model import architectures, branches, compat, gpumodels, toolkit
from dlimages.model.requirecuda import driver_key
from dlimages.payload import dl_stack

T = TypeVar("T")


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
    # The NVIDIA container toolkit's version ("1.17.8"); toolkit.NONE: not installed (--toolkit none); None: not known.
    toolkit: str | None = None
    engine: str | None = None  # the Docker engine's version ("26.1.5"); None: not known
    cpu: str | None = None  # the host's CPU as Docker names platforms ("amd64", "arm64"); None: not known
    branch: int | None = None  # the driver was given as this branch (580): `driver` is the branch's first release


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
        if match := form.fullmatch(cleaned):
            return dl_stack.arch_name((int(match["major"]), int(match["minor"])))
    raise InputError([Problem("--gpu", f"{text!r} is no GPU model or architecture", f"{gpumodels.EXAMPLES}; sm_90")])


def parse_driver(text: str) -> str:
    """An NVIDIA driver version such as "535.104.05" or "535.104"; InputError on "--driver" otherwise."""
    cleaned = text.strip()
    if not _DRIVER.fullmatch(cleaned):
        raise InputError([Problem("--driver", f"{text!r} is not an NVIDIA driver version", "e.g. 535.104.05")])
    return cleaned


DRIVER_ALLOWED = f"a driver version, e.g. 535.104.05, or a branch: {branches.KNOWN}"


def parse_driver_or_branch(text: str) -> tuple[str, int | None]:
    """A driver version, or a branch judged at its first release, and the branch when one was given.

    Example: parse_driver_or_branch("r580") == ("580.65.06", 580); parse_driver_or_branch("535.104.05") ==
    ("535.104.05", None). A branch model/branches does not hold is an InputError listing those it holds.
    """
    cleaned = text.strip()
    form = branches.BRANCH_FORM.fullmatch(cleaned)
    if form is None:
        if _DRIVER.fullmatch(cleaned):
            return cleaned, None
        raise InputError([Problem("--driver", f"{text!r} is not an NVIDIA driver version or branch", DRIVER_ALLOWED)])
    branch = branches.BY_NUMBER.get(int(form["number"]))
    if branch is None:
        said = f"{text!r} is a driver branch whose first release is not known here (model/branches)"
        raise InputError([Problem("--driver", said, DRIVER_ALLOWED)])
    return branch.first_release, branch.number


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
    brands = _parsed(parse_brand, brand, problems) or ()
    no_kit = kit is not None and kit.strip().lower() == toolkit.NONE  # no container toolkit: no GPU container starts
    given_kit = _parsed(toolkit.parse_toolkit, None if no_kit else kit, problems)
    if gpu is None and driver is None:
        if problems:
            raise InputError(problems)
        node = probe()
        node = dataclasses.replace(node, toolkit=given_kit) if given_kit else node
        node = dataclasses.replace(node, toolkit=toolkit.NONE, container_runtime=False) if no_kit else node
        if brands and node.gpus:
            node = _with_brands(node, brands, problems)
        if problems:
            raise InputError(problems)
        return node
    gpus: list[Gpu] = []
    if gpu is None:
        problems.append(Problem("--gpu", "is needed with --driver: the node to judge has both", "e.g. sm_90 or 9.0"))
    else:
        for index, entry in enumerate(entry.strip() for entry in gpu.split(",")):
            model = gpumodels.find(entry)
            if model is not None:
                gpus.append(Gpu(model.name, model.arch))
            elif (arch := _parsed(parse_arch, entry, problems)) is not None:
                gpus.append(Gpu(f"GPU {index}", arch))
    if driver is None:
        problems.append(Problem("--driver", "is needed with --gpu: the node to judge has both", "e.g. 535.104.05"))
    parsed_driver, branch = _parsed(parse_driver_or_branch, driver, problems) or (None, None)
    hosts = {m.host_arch for m in map(gpumodels.find, (g.name for g in gpus)) if m is not None and m.host_arch}
    kit_given, runtime = (toolkit.NONE, False) if no_kit else (given_kit, None)
    node = Node(
        parsed_driver, tuple(gpus), runtime, "given", kit_given, cpu=next(iter(sorted(hosts)), None), branch=branch
    )
    if parsed_driver is not None and not brands:  # a model's name says its brand
        node = dataclasses.replace(node, gpus=tuple(_named_brand(g, parsed_driver) for g in node.gpus))
    if brands and gpus and parsed_driver is not None:
        # Tesla and NVIDIA both say data-center; NVML reports the one this driver knows (data_center_brand).
        given = tuple(data_center_brand(parsed_driver) if b in compat.DATA_CENTER_BRANDS else b for b in brands)
        node = _with_brands(node, given, problems)
    if problems:
        raise InputError(problems)
    if impossible := impossibilities(node):
        raise ImpossibleNode(impossible)
    return node


def _parsed(parse: Callable[[str], T], text: str | None, problems: list[Problem]) -> T | None:
    """`parse(text)`, or None when no text is given or it is refused (its problems added to `problems`)."""
    if text is None:
        return None
    try:
        return parse(text)
    except InputError as error:
        problems += error.problems
        return None


class ImpossibleNode(InputError):
    """A node no one can have: a GPU on a driver branch that does not run it. A fleet lists such a node as refused."""


def impossibilities(node: Node) -> list[Problem]:
    """Why the node cannot exist, one problem per kind of GPU that its driver's branch does not run; empty if none.

    Example: a B200 on 550.54.15: Blackwell GPUs need R570 or newer. Checked for given nodes only: a probed host
    exists, whatever the table says.
    """
    if node.driver is None:
        return []
    number = driver_key(node.driver)[0]
    driver = f"driver {node.driver}" + (f" (R{node.branch}'s first release)" if node.branch else "")
    problems = []
    for gpu in dict.fromkeys(node.gpus):
        found = architectures.unsupported(gpu.arch, number)
        if found is not None:
            said = f"{gpu.name} ({gpu.arch}) on {driver} is a node that cannot exist: {found.why}"
            problems.append(Problem("--gpu and --driver", said, f"{found.allowed} for {gpu.name}"))
    return problems


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
