"""The matrix for people who look before they read: the table of docs/matrix.md, the driver tables of
docs/provisioning.md and the mirror profiles of docs/offline.md, made from the matrix and its expansion (docsblocks
writes them into their documents and checks them for drift).

Python computes what each table cell says; the templates in templates/docs/ lay the blocks out (notes, prose, tables,
a `|` in a cell escaped). Pure and deterministic: the same matrix, locks and documents give the same bytes, with
nothing from the clock or the host.
"""

from __future__ import annotations

import itertools
import shlex
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import jinja2

from dlimages.model import doctor, gpunode
from dlimages.model.cells import Cell, Exclusion, Expansion
from dlimages.model.compat import Candidate, DriverRule
from dlimages.model.spec import Matrix, version_key
from dlimages.payload.dl_stack import FRAMEWORKS

Row = tuple[str, ...]  # what each cell of a table row says, in the order of the template's columns

# What each Reason.rule of compat.judge means, in a line: the legend of the matrix page's exclusions.
REASON_CODES: Mapping[str, str] = {
    "cuda-build": "the release was not published for this CUDA version",
    "python-wheel": "the release, or a package installed beside it, has no wheel for this Python",
    "no-duplicate-cuda": "the release's wheels carry CUDA, so no devel flavor (its toolkit would ship them twice)",
    "base-image": "nvidia/cuda has no base image for this CUDA on this Python's OS",
    "cudnn": "the nvidia/cuda base carries an older cuDNN than the release needs",
}
UNKNOWN_CODE = "see `invoke matrix --explain`"
SOURCE_TEXT = {"wheel": "the framework's wheels", "base": "the `nvidia/cuda` base"}  # by Cell.cuda_source
MINOR_VERSION_DOC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"


@dataclass(frozen=True)
class ExampleNode:
    """A GPU node the provisioning guide judges with the doctor, as `invoke doctor --gpu --driver --brand` would."""

    name: str
    gpu: str
    driver: str
    brand: str

    @property
    def flags(self) -> str:
        return f"--gpu {shlex.quote(self.gpu)} --driver {self.driver} --brand {self.brand}"


# Nodes platform teams run, old and new: each shows one way of running (or not) that the doctor knows.
EXAMPLE_NODES = (
    ExampleNode("H100 / H200 (data-center), R535", "sm_90", "535.104.05", "nvidia"),
    ExampleNode("A100 (data-center), R470 long-term branch", "sm_80", "470.82.01", "nvidia"),
    ExampleNode("T4 (data-center), R450", "sm_75", "450.80.02", "tesla"),
    ExampleNode("V100 (data-center), R418", "sm_70", "418.87.01", "tesla"),
    ExampleNode("GeForce RTX 3090, R470", "sm_86", "470.82.01", "geforcertx"),
    ExampleNode("GeForce RTX 4090, R525", "sm_89", "525.60.13", "geforcertx"),
    # Today's: model names and driver branches, as fleets name them.
    ExampleNode("H100 / H200 (data-center), R580", "H100", "R580", "nvidia"),
    ExampleNode("H20 (data-center), R570", "H20", "R570", "nvidia"),
    ExampleNode("L40S (data-center), R550", "L40S", "R550", "nvidia"),
    ExampleNode("B200 (data-center), R570", "B200", "R570", "nvidia"),
    ExampleNode("GeForce RTX 5090, R575", "RTX 5090", "R575", "geforcertx"),
    ExampleNode("V100 (data-center), R580", "V100", "R580", "nvidia"),
)


# --- shared views of the expansion ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Point:
    """Everything the expansion says about one (framework, version, CUDA, Python): its cells and exclusions."""

    cells: list[Cell] = field(default_factory=list)
    excluded: list[Exclusion] = field(default_factory=list)

    @property
    def codes(self) -> tuple[str, ...]:
        """The rules that exclude every flavor here (PyTorch on Python 3.11: python-wheel, not also the
        no-duplicate-cuda of its devel flavor); every rule when no one rule excludes them all."""
        rules = [{reason.rule for reason in exclusion.reasons} for exclusion in self.excluded]
        common = set.intersection(*rules) if rules else set()
        return tuple(sorted(common or set().union(*rules)))


def _points(expansion: Expansion) -> defaultdict[tuple[str, str, str, str], _Point]:
    """The _Point of each (framework, version, CUDA, Python); an empty one where the expansion says nothing."""
    points: defaultdict[tuple[str, str, str, str], _Point] = defaultdict(_Point)
    for cell in expansion.cells:
        points[cell.framework, cell.framework_version, cell.cuda, cell.python].cells.append(cell)
    for exclusion in expansion.excluded:
        c = exclusion.candidate
        points[c.framework, c.version, c.cuda, c.python].excluded.append(exclusion)
    return points


def _built_for(matrix: Matrix, framework: str, cuda: str) -> list[str]:
    """The framework's releases published for this CUDA (whatever the rules then say about Python and flavor)."""
    releases = matrix.frameworks[framework].releases
    return [v for v in sorted(releases, key=version_key) if cuda in releases[v].variants]


def _flavors(cells: Iterable[Cell], matrix: Matrix) -> str:
    have = {cell.flavor for cell in cells}
    return ", ".join(flavor for flavor in matrix.axes.flavor if flavor in have)


def _link(url: str, label: str) -> str:
    return f"[{label}]({url})" if url.startswith(("https://", "http://")) else url


def _versions_of(cells: Sequence[Cell], *, cuda: bool = True) -> str:
    """PyTorch 2.1.2, 2.2.2 + CUDA 12.1; TensorFlow 2.14.1 + CUDA 11.8: releases grouped by framework and CUDA
    (without "+ CUDA X" when `cuda` is False, for cells of one CUDA)."""
    groups: dict[tuple[str, str], set[str]] = {}
    for cell in cells:
        groups.setdefault((FRAMEWORKS[cell.framework].title, cell.cuda), set()).add(cell.framework_version)
    return "; ".join(
        f"{title} {', '.join(sorted(versions, key=version_key))}" + (f" + CUDA {on}" if cuda else "")
        for (title, on), versions in groups.items()
    )


# --- docs/matrix.md: the table -------------------------------------------------------------------------------


def _cuda_libraries(cell: Cell) -> str:
    if cell.cuda_source == "wheel":
        wheels = f"wheels `+{cell.install.variant_tag}`" if cell.install.variant_tag else "PyPI's wheels"
        return f"{wheels}, cuDNN {cell.cudnn}"
    suffix = f"-{cell.flavor}-{cell.os}"
    base = cell.base_image.removesuffix(suffix) + "-*" if cell.base_image.endswith(suffix) else cell.base_image
    return f"base `{base}`, cuDNN {cell.cudnn}"


def _lock_text(cells: Sequence[Cell], locks: Mapping[str, str], matrix: Matrix) -> str:
    by_status: dict[str, set[str]] = {}
    for cell in cells:
        by_status.setdefault(locks.get(cell.slug, "unlocked"), set()).add(cell.python)
    if len(by_status) == 1:
        return next(iter(by_status))
    order = matrix.axes.python
    return "; ".join(
        f"{status}: {', '.join(sorted(pythons, key=order.index))}" for status, pythons in sorted(by_status.items())
    )


def matrix_table(env: jinja2.Environment, matrix: Matrix, expansion: Expansion, locks: Mapping[str, str]) -> str:
    """The matrix page's block: releases by CUDA by Python with each valid cell's flavors, CUDA libraries, base and
    lock, then every excluded combination, grouped by release and reason (in a <details>)."""
    point = _points(expansion)
    pythons = matrix.axes.python
    rows: list[Row] = []
    for framework in matrix.frameworks:
        for cuda in matrix.axes.cuda:
            merged: list[tuple[list[str], Row]] = []
            for version in _built_for(matrix, framework, cuda):
                points = [point[framework, version, cuda, python] for python in pythons]
                cells = [cell for p in points for cell in p.cells]
                entries = [
                    _flavors(p.cells, matrix) if p.cells else "✗ " + ", ".join(f"`{code}`" for code in p.codes)
                    for p in points
                ]
                key = (
                    *entries,
                    " / ".join(dict.fromkeys(_cuda_libraries(cell) for cell in cells)) if cells else "none built",
                    _lock_text(cells, locks, matrix) if cells else "",
                )
                if merged and merged[-1][1] == key:
                    merged[-1][0].append(version)  # the same row but for the version: one row, several versions
                else:
                    merged.append(([version], key))
            rows += [(f"{FRAMEWORKS[framework].title} {', '.join(versions)}", cuda, *key) for versions, key in merged]
    wheel_bases = {c.python: c.base_image for c in expansion.cells if c.cuda_source == "wheel"}
    return env.get_template("docs/matrix.md.j2").render(
        cells=len(expansion.cells),
        counts=[(FRAMEWORKS[f].title, sum(1 for c in expansion.cells if c.framework == f)) for f in matrix.frameworks],
        combinations=len(expansion.cells) + len(expansion.excluded),
        locked=sum(1 for cell in expansion.cells if locks.get(cell.slug) == "locked"),
        wheel_bases=[(python, wheel_bases[python]) for python in pythons if python in wheel_bases],
        pythons=pythons,
        rows=rows,
        excluded=len(expansion.excluded),
        exclusions=_exclusions(matrix, expansion),
        codes=[
            (code, REASON_CODES.get(code, UNKNOWN_CODE))
            for code in sorted({r.rule for e in expansion.excluded for r in e.reasons})
        ],
    )


def _exclusions(matrix: Matrix, expansion: Expansion) -> list[Row]:
    """The exclusions' rows: release, where, rule and reason, grouped by release and rule."""
    groups: dict[tuple[str, str, str], list[Exclusion]] = {}
    for exclusion in expansion.excluded:
        c = exclusion.candidate
        for reason in exclusion.reasons:
            groups.setdefault((c.framework, c.version, reason.rule), []).append(exclusion)
    order = {framework: index for index, framework in enumerate(matrix.frameworks)}
    rows: list[Row] = []
    for (framework, version, rule), exclusions in sorted(
        groups.items(), key=lambda item: (order[item[0][0]], version_key(item[0][1]), item[0][2])
    ):
        reasons = [r for e in exclusions for r in e.reasons if r.rule == rule]
        cited = ", ".join(_link(url, "source") for url in dict.fromkeys(r.source for r in reasons))
        where = "; ".join(_describe(matrix, [e.candidate for e in exclusions]))
        text = f"{_merged_texts([r.text for r in reasons])} ({cited})"
        rows.append((f"{FRAMEWORKS[framework].title} {version}", where, f"`{rule}`", text))
    return rows


def _merged_texts(texts: Sequence[str]) -> str:
    """The reasons' texts once each; texts that differ only in what follows their last ", not " are merged into one
    ("... for CUDA 11.0, not 11.6, 11.8")."""
    unique = list(dict.fromkeys(texts))
    heads = {text.rpartition(", not ")[0] for text in unique}
    if len(unique) > 1 and len(heads) == 1 and all(", not " in text for text in unique):
        head = heads.pop()
        return f"{head}, not " + ", ".join(text.rpartition(", not ")[2] for text in unique)
    return "; ".join(unique)


def _describe(matrix: Matrix, candidates: Sequence[Candidate]) -> list[str]:
    """The candidates of one release as axis values, e.g. ["CUDA 11.8, 12.1 · devel"]; an axis taking every value
    is left out. A set that is not a product of its axes' values is described CUDA by CUDA."""
    axes: tuple[tuple[str, list[str], Callable[[Candidate], str]], ...] = (
        ("CUDA ", matrix.axes.cuda, lambda c: c.cuda),
        ("Python ", matrix.axes.python, lambda c: c.python),
        ("", matrix.axes.flavor, lambda c: c.flavor),
    )
    values = [[v for v in allowed if any(get(c) == v for c in candidates)] for _, allowed, get in axes]
    keys = {(c.cuda, c.python, c.flavor) for c in candidates}
    if keys == set(itertools.product(*values)):
        parts = [
            f"{label}{', '.join(found)}"
            for (label, allowed, _), found in zip(axes, values, strict=True)
            if len(found) < len(allowed)
        ]
        return [" · ".join(parts) or "every combination"]
    return [
        description
        for cuda in values[0]
        for description in _describe(matrix, [c for c in candidates if c.cuda == cuda])
    ]


# --- docs/provisioning.md: driver floors and example nodes ------------------------------------------------------


def driver_tables(env: jinja2.Environment, matrix: Matrix, expansion: Expansion) -> str:
    """Driver floors per CUDA, then the driver rule of each group of images: from matrix.yaml through each cell's
    compat.DriverRule, the rule its NVIDIA_REQUIRE_CUDA, labels and the doctor share."""
    floors: list[Row] = []
    for cuda in matrix.axes.cuda:
        toolkit = matrix.cuda[cuda]
        cells = [cell for cell in expansion.cells if cell.cuda == cuda]
        wheels = [cell for cell in cells if cell.cuda_source == "wheel"]
        bases = [cell for cell in cells if cell.cuda_source != "wheel"]
        if toolkit.compat_driver == toolkit.min_driver:
            floor = "none: its own driver"
        else:
            floor = f"{toolkit.compat_driver}" + ("" if wheels else " (no image here uses it)")
        branches = sorted({b for cell in bases for b in cell.driver.forward_compat_branches}, key=int)
        forward = ", ".join(f"R{branch}" for branch in branches) if branches else "none"
        if not bases:
            forward += " (no image here is on `nvidia/cuda`)"
        images = "; ".join(
            f"{label}: {_versions_of(group, cuda=False)}"
            for label, group in (("wheels", wheels), ("`nvidia/cuda`", bases))
            if group
        )
        sources = [_link(toolkit.source, "release notes")]
        if toolkit.compat_driver != toolkit.min_driver:
            sources.append(_link(MINOR_VERSION_DOC, "minor-version"))
        base_images = matrix.nvidia_cuda.toolkits.get(cuda)
        if bases and base_images is not None and base_images.require_source:
            sources.append(_link(base_images.require_source, "base Dockerfile"))
        floors.append((cuda, toolkit.toolkit, toolkit.min_driver, floor, forward, images or "none", ", ".join(sources)))
    groups: dict[tuple[DriverRule, str], list[Cell]] = {}
    for cell in expansion.cells:
        groups.setdefault((cell.driver, cell.cuda_source), []).append(cell)
    rules = [
        (_versions_of(cells), SOURCE_TEXT[source], _require_text(matrix, rule, source), _runs_on(rule))
        for (rule, source), cells in sorted(
            groups.items(), key=lambda item: (matrix.axes.cuda.index(item[0][0].cuda), item[0][1] != "wheel")
        )
    ]
    return env.get_template("docs/drivers.md.j2").render(floors=floors, rules=rules)


def _require_text(matrix: Matrix, rule: DriverRule, source: str) -> str:
    if source == "wheel":
        return f"`{rule.require_cuda}` (ours)"
    admitted = doctor.admitted_branches(rule.require_cuda)
    images = matrix.nvidia_cuda.toolkits.get(rule.cuda)
    where = _link(images.require_source, "NVIDIA's") if images and images.require_source else "NVIDIA's"
    first = rule.require_cuda.split(" ")[0]
    return (f"`{first}` or branch {admitted}" if admitted else f"`{first}`") + f" ({where})"


def _runs_on(rule: DriverRule) -> str:
    parts = [f"driver ≥ {rule.toolkit_driver}: any GPU"]
    if rule.cuda_compat is None and rule.compat_driver != rule.toolkit_driver:
        gpus = (
            f"GPUs below sm_{rule.jit_from.replace('.', '')} (newer ones need PTX JIT)" if rule.jit_from else "any GPU"
        )
        parts.append(f"≥ {rule.compat_driver}: {gpus}, minor-version compatibility")
        if rule.jit_driver and rule.jit_from:
            major = rule.jit_from.split(".")[0]
            parts.append(f"≥ {rule.jit_driver}: sm_{major}x GPUs too, through PTX JIT")
    branches = rule.forward_compat_branches
    if branches:
        parts.append(f"R{', R'.join(branches)}: data-center GPUs only, forward compatibility")
    return "; ".join(parts)


def example_nodes(env: jinja2.Environment, expansion: Expansion) -> str:
    """What the doctor says about EXAMPLE_NODES: how many images run, how, and which do not and why."""
    rows: list[Row] = []
    for example in EXAMPLE_NODES:
        node = gpunode.node_from_flags(example.gpu, example.driver, _no_probe, example.brand)
        arch = node.gpus[0].arch or example.gpu
        runs: Counter[str] = Counter()
        causes: dict[str, list[Cell]] = {}
        for cell in expansion.cells:
            verdict = doctor.verdict(cell, node)
            if verdict.runs:
                runs[verdict.runs_through or "?"] += 1
            elif doctor.kernels_for(cell, arch) is None:
                causes.setdefault(f"no kernels for {arch}", []).append(cell)
            elif verdict.needs_driver:
                causes.setdefault(f"needs driver ≥ {verdict.needs_driver}", []).append(cell)
            else:
                causes.setdefault("; ".join(verdict.reasons), []).append(cell)
        how = ", ".join(f"{runs[path]} {path}" for path in doctor.PATHS if path in runs)
        not_run = "; ".join(f"{cause} ({len(cells)}): {_versions_of(cells)}" for cause, cells in causes.items())
        rows.append((example.name, f"`{example.flags}`", f"{sum(runs.values())} ({how or 'none'})", not_run or "none"))
    return env.get_template("docs/nodes.md.j2").render(cells=len(expansion.cells), rows=rows)


def _no_probe() -> gpunode.Node:
    raise AssertionError("example nodes are given by flags; nothing is probed")  # pragma: no cover


# --- docs/offline.md: the mirror profiles -----------------------------------------------------------------------


def mirror_table(env: jinja2.Environment, matrix: Matrix) -> str:
    """Where each profile of matrix.yaml's `mirrors:` takes base images, apt, pip and PyTorch's CUDA wheels from (the
    built-in `host` profile is the template's last row)."""
    rows: list[Row] = []
    for name, profile in matrix.mirrors.items():
        apt = profile.apt.debian if profile.apt else None
        if profile.pytorch_wheels:
            wheels = f"`{profile.pytorch_wheels}` (find-links)"
        elif profile.pypi:  # its pip mirror has no PyTorch CUDA wheels: the build says so and takes them upstream
            wheels = f"not mirrored by {name}: upstream, said in the build log"
        else:
            wheels = "upstream (PyTorch's index)"
        rows.append(
            (
                f"`{name}`",
                profile.description,
                f"`{profile.bases.registry}`" if profile.bases else "Docker Hub",
                f"`{urlsplit(apt).netloc}`" if apt else "upstream",
                f"`{urlsplit(profile.pypi).netloc}`" if profile.pypi else "upstream (PyPI)",
                wheels,
            )
        )
    return env.get_template("docs/mirrors.md.j2").render(rows=rows)
