"""A fleet for the doctor (`invoke doctor --nodes FILE`): a file of nodes, or what `kubectl get nodes -o json` prints,
read through NVIDIA GPU Feature Discovery's labels; judged together, as a node-by-image table.

A file of nodes (YAML or JSON) is a list of {name, gpu, driver, and optionally brand, toolkit, cpu}, each read as
the doctor's flags are (`--gpu H100,H100 --driver 550.54.15`). A Kubernetes node list gives per node the labels GFD
sets (GFD): the GPU model (`nvidia.com/gpu.product`), their number, their compute capability and the driver; the CPU
is Kubernetes' own `kubernetes.io/arch`. A node without GFD's labels has no NVIDIA GPU the cluster knows of: it is
listed as left out, not judged. A node that cannot exist (a GPU on a driver branch that does not run it:
gpunode.impossibilities) is listed as refused, with why, and the other nodes are judged: one mistyped entry, or one
node whose labels the table does not expect, leaves the rest of the fleet's answer intact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from dlimages.core.errors import InputError, Problem
from dlimages.model import doctor, gpumodels, gpunode
from dlimages.model.cells import Cell
from dlimages.model.gpunode import Gpu, ImpossibleNode, Node

GFD = "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md"
NODES_ALLOWED = (
    "a YAML or JSON list of {name, gpu, driver[, brand, toolkit, cpu]} (driver: a version or a branch such as R580), "
    "or the output of `kubectl get nodes -o json`"
)
_DRIVER_PARTS = (
    (
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ),
    ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"),  # GFD's older names
)
CPUS = ("amd64", "arm64")


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[tuple[str, Node], ...]  # (name, node)
    left_out: tuple[str, ...]  # nodes without a GPU the cluster knows of
    refused: tuple[tuple[str, str], ...] = ()  # (name, why): nodes that cannot exist


def read_fleet(text: str, where: str) -> Fleet:
    """The fleet a file describes; InputError naming the file, the node and what is allowed for anything else."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError([Problem(f"--nodes {where}", f"is not YAML or JSON ({error})", NODES_ALLOWED)]) from None
    if isinstance(data, Mapping) and isinstance(data.get("items"), list):
        return _kubernetes(data["items"], where)
    if isinstance(data, list) and data:
        return _listed(data, where)
    raise InputError([Problem(f"--nodes {where}", "holds no node", NODES_ALLOWED)])


def _listed(entries: Sequence[Any], where: str) -> Fleet:
    problems: list[Problem] = []
    nodes, refused = [], []
    for number, entry in enumerate(entries, start=1):
        at = f"--nodes {where}: node {number}"
        if not isinstance(entry, Mapping) or not entry.get("gpu") or not entry.get("driver"):
            problems.append(Problem(at, "needs gpu and driver", "{name, gpu, driver[, brand, toolkit, cpu]}"))
            continue
        name = str(entry.get("name") or f"node {number}")
        try:
            node = gpunode.node_from_flags(
                str(entry["gpu"]), str(entry["driver"]), _not_probed, _text(entry, "brand"), _text(entry, "toolkit")
            )
            node = _with_cpu(node, _text(entry, "cpu"), f"{at} ({name})")
        except ImpossibleNode as error:
            refused.append((name, _why(error.problems)))
            continue
        except InputError as error:
            problems += [Problem(f"{at} ({name}): {p.where}", p.message, p.allowed) for p in error.problems]
            continue
        nodes.append((name, dataclasses.replace(node, source=f"given: {name}")))
    if problems:
        raise InputError(problems)
    return Fleet(tuple(nodes), (), tuple(refused))


def _kubernetes(items: Sequence[Any], where: str) -> Fleet:
    problems: list[Problem] = []
    nodes, left_out, refused = [], [], []
    for number, item in enumerate(items, start=1):
        metadata = item.get("metadata", {}) if isinstance(item, Mapping) else None
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("labels") or {}, Mapping):
            said = "is not a node: metadata.labels must be an object of labels"
            problems.append(Problem(f"--nodes {where}: item {number}", said, NODES_ALLOWED))
            continue
        name = str(metadata.get("name") or f"item {number}")
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        product = labels.get("nvidia.com/gpu.product", "")
        major, minor = labels.get("nvidia.com/gpu.compute.major"), labels.get("nvidia.com/gpu.compute.minor")
        if not product and major is None:
            left_out.append(name)
            continue
        at = f"--nodes {where}: node {name}"
        model = gpumodels.find(product)
        arch = f"sm_{major}{minor}" if major and minor else model.arch if model else None
        if arch is None:
            problems.append(Problem(at, f"GPU {product!r} has no compute capability label and is no known model", GFD))
            continue
        driver = labels.get("nvidia.com/cuda.driver-version.full") or _driver_from_parts(labels)
        if driver is None:
            problems.append(Problem(at, "has no driver version label (nvidia.com/cuda.driver-version.*)", GFD))
            continue
        try:
            driver = gpunode.parse_driver(driver)
            count = int(labels.get("nvidia.com/gpu.count", "1"))
        except (InputError, ValueError):
            problems.append(Problem(at, f"driver {driver!r} or GPU count is not what GFD writes", GFD))
            continue
        gpu_name = model.name if model else product
        gpu = Gpu(gpu_name, gpunode.parse_arch(arch), gpunode.brand_from_name(product or gpu_name, driver))
        cpu = labels.get("kubernetes.io/arch") or (model.host_arch if model else None)
        node = Node(driver, (gpu,) * max(count, 1), None, f"kubernetes: {name}", cpu=cpu)
        if impossible := gpunode.impossibilities(node):
            refused.append((name, _why(impossible)))
            continue
        nodes.append((name, node))
    if problems:
        raise InputError(problems)
    return Fleet(tuple(nodes), tuple(left_out), tuple(refused))


def _why(problems: Sequence[Problem]) -> str:
    return "; ".join(f"{p.message} (allowed: {p.allowed})" for p in problems)


def _driver_from_parts(labels: Mapping[str, str]) -> str | None:
    for keys in _DRIVER_PARTS:
        parts = [labels.get(key) for key in keys]
        if parts[0] and parts[1]:
            return ".".join(part for part in parts if part)
    return None


def _with_cpu(node: Node, cpu: str | None, at: str) -> Node:
    if cpu is None:
        return node
    if cpu not in CPUS:
        raise InputError([Problem(f"{at}: cpu", f"is {cpu!r}", " or ".join(CPUS))])
    return dataclasses.replace(node, cpu=cpu)


def _text(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return None if value is None else str(value)


def _not_probed() -> Node:
    raise AssertionError("a node of a fleet file is given, never probed")


def fleet_rows(cells: Sequence[Cell], fleet: Fleet) -> list[dict[str, object]]:
    """`doctor.report`'s rows for every node, each with the node's name under "node"; a refused node's rows say for
    each image that it does not run there, with the condition "impossible-node" and why."""
    rows = [{"node": name, **row} for name, node in fleet.nodes for row in doctor.report(cells, node)]
    for name, why in fleet.refused:
        sources = doctor.cited([why])
        verdict = {"runs": False, "runs_through": None, "needs_driver": None, "condition": IMPOSSIBLE}
        rows += [
            {"node": name, **cell.as_json(), **verdict, "reasons": [why], "run_notes": [], "sources": list(sources)}
            for cell in cells
        ]
    return rows


IMPOSSIBLE = "impossible-node"


def fleet_table(cells: Sequence[Cell], fleet: Fleet) -> str:
    """A node-by-image table for people: per image, on each node, how it runs (driver, minor, forward) or NO."""
    short = {doctor.PATHS[0]: "runs", doctor.PATHS[1]: "minor", doctor.PATHS[2]: "fwd"}
    names = [name for name, _ in fleet.nodes]
    verdicts = {name: doctor.report(cells, node) for name, node in fleet.nodes}
    lines = [f"| image | {' | '.join(names)} |", f"| --- |{' --- |' * len(names)}"] if names else []
    for index, cell in enumerate(cells if names else ()):
        row = [
            short.get(str(verdicts[name][index]["runs_through"]), "runs") if verdicts[name][index]["runs"] else "NO"
            for name in names
        ]
        lines.append(f"| {cell.image}:{cell.tags[0] if cell.tags else '?'} | {' | '.join(row)} |")
    totals = [f"{name}: {sum(bool(r['runs']) for r in verdicts[name])} of {len(cells)}" for name in names]
    lines += ["", "images that run: " + "; ".join(totals)] if names else ["no node to judge"]
    lines += [f"left out (no NVIDIA GPU labels): {', '.join(fleet.left_out)}"] if fleet.left_out else []
    lines += [f"refused, a node that cannot exist: {name}: {why}" for name, why in fleet.refused]
    lines.append("why an image does not run on a node: `invoke doctor --nodes FILE --json`, or --gpu and --driver")
    return "\n".join(lines)
