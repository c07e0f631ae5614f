"""Expand the matrix into valid cells (and explained exclusions), and select cells from user flags."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dlimages.compat import FRAMEWORK_TITLES, Candidate, Reason, judge, os_for_python
from dlimages.errors import InputError, Problem, allowed_list
from dlimages.spec import MATRIX_FILE, CellRef, Matrix, Variant, version_key

FRAMEWORK_FLAGS = {"pytorch": "torch", "tensorflow": "tf"}


@dataclass(frozen=True)
class FrameworkInstall:
    """How pip gets the framework: the requirement strings and where the CUDA build comes from."""

    requirements: tuple[str, ...]
    index_url: str | None  # an extra index holding the CUDA build (PyTorch's own wheel index)
    find_links: str | None  # a find-links page holding the CUDA build (PyTorch's older releases)
    variant_tag: str | None  # e.g. cu118: names the build on PyTorch's index and on mirrors of it

    @property
    def constraints(self) -> tuple[str, ...]:
        """The requirements without extras, to hold the framework fixed while other packages install."""
        return tuple(re.sub(r"\[[^]]*\]", "", requirement) for requirement in self.requirements)


@dataclass(frozen=True)
class Cell:
    """One image the matrix publishes: every axis fixed, every fact resolved."""

    image: str
    release: str
    framework: str
    framework_version: str
    cuda: str
    cuda_toolkit: str
    cudnn: str
    python: str
    flavor: str
    os: str
    os_family: str
    os_codename: str
    base_image: str
    cuda_source: str  # "wheel": the framework's wheels carry CUDA; "base": the base image does
    min_driver: str
    compat_driver: str
    arch_sass: tuple[str, ...]
    arch_ptx: tuple[str, ...]
    install: FrameworkInstall
    packages: tuple[tuple[str, str], ...]
    bootstrap_base: bool
    aliases: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """Every axis in one path- and tag-safe word, e.g. cuda11.8-torch2.1.2-py3.10-runtime."""
        return (
            f"cuda{self.cuda}-{FRAMEWORK_FLAGS[self.framework]}{self.framework_version}-py{self.python}-{self.flavor}"
        )

    @property
    def immutable_tag(self) -> str:
        return f"{self.release}-{self.slug}"

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.immutable_tag, *self.aliases)

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(f"{self.image}:{tag}" for tag in self.tags)

    @property
    def dockerfile(self) -> str:
        return f"images/{self.framework}/{self.slug}/Dockerfile"

    @property
    def title(self) -> str:
        return f"{FRAMEWORK_TITLES[self.framework]} {self.framework_version}"

    def as_json(self) -> dict[str, object]:
        return {
            "image": self.image,
            "tags": list(self.tags),
            "cuda": self.cuda,
            "cuda_toolkit": self.cuda_toolkit,
            "cudnn": self.cudnn,
            "framework": self.framework,
            "framework_version": self.framework_version,
            "python": self.python,
            "flavor": self.flavor,
            "os": self.os,
            "base_image": self.base_image,
            "cuda_source": self.cuda_source,
            "min_driver": self.min_driver,
            "compat_driver": self.compat_driver,
            "cuda_arch_list": [*self.arch_sass, *(f"compute_{a[3:]}" for a in self.arch_ptx)],
            "dockerfile": self.dockerfile,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Exclusion:
    candidate: Candidate
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Expansion:
    cells: tuple[Cell, ...]
    excluded: tuple[Exclusion, ...] = field(default=())


def candidates(matrix: Matrix) -> Iterable[Candidate]:
    for framework, spec in matrix.frameworks.items():
        for version, cuda, python, flavor in itertools.product(
            spec.releases, matrix.axes.cuda, matrix.axes.python, matrix.axes.flavor
        ):
            yield Candidate(framework, version, cuda, python, flavor)


def expand(matrix: Matrix) -> Expansion:
    """All valid cells in a stable order, and every excluded candidate with its reasons.

    Raises InputError when the matrix's own references (defaults, aliases, tags) do not hold.
    """
    cells: list[Cell] = []
    excluded: list[Exclusion] = []
    for candidate in candidates(matrix):
        reasons = judge(matrix, candidate)
        if reasons:
            excluded.append(Exclusion(candidate, tuple(reasons)))
        else:
            cells.append(_make_cell(matrix, candidate))
    cells = _with_aliases(matrix, cells)
    return Expansion(tuple(cells), tuple(excluded))


def _make_cell(matrix: Matrix, c: Candidate) -> Cell:
    framework = matrix.frameworks[c.framework]
    release = framework.releases[c.version]
    variant = release.variants[c.cuda]
    toolkit = matrix.cuda[c.cuda]
    os_name = os_for_python(matrix, c.python)
    assert os_name is not None  # judge() refused the candidate otherwise
    os_spec = matrix.os[os_name]
    notes: list[str] = []
    if variant.cuda_libs == "wheel":
        base_image, cuda_source, cudnn = os_spec.image, "wheel", variant.cudnn
    else:
        images = matrix.nvidia_cuda.toolkits[c.cuda]
        base_image = f"{matrix.nvidia_cuda.repository}:{toolkit.toolkit}-cudnn8-{c.flavor}-{os_name}"
        cuda_source, cudnn = "base", images.cudnn
        if version_key(images.cudnn)[:2] != version_key(variant.cudnn)[:2]:
            notes.append(
                f"upstream tested cuDNN {variant.cudnn}; the base image carries cuDNN {images.cudnn}, "
                "compatible by cuDNN's same-major, newer-minor rule"
            )
    pins = dict(matrix.packages.default)
    pins.update(matrix.packages.overrides.get(f"{framework.package}=={c.version}", {}))
    return Cell(
        image=matrix.images[c.framework].name,
        release=matrix.release,
        framework=c.framework,
        framework_version=c.version,
        cuda=c.cuda,
        cuda_toolkit=toolkit.toolkit,
        cudnn=cudnn,
        python=c.python,
        flavor=c.flavor,
        os=os_name,
        os_family=os_spec.family,
        os_codename=os_spec.codename,
        base_image=base_image,
        cuda_source=cuda_source,
        min_driver=toolkit.min_driver,
        compat_driver=toolkit.compat_driver,
        arch_sass=tuple(variant.arch.sass),
        arch_ptx=tuple(variant.arch.ptx),
        install=_install(framework.package, c.version, c.cuda, release.companions, variant),
        packages=tuple(sorted(pins.items())),
        bootstrap_base=os_spec.bootstrap and cuda_source == "wheel",
        notes=tuple(notes),
    )


def _install(package: str, version: str, cuda: str, companions: dict[str, str], variant: Variant) -> FrameworkInstall:
    extras = f"[{','.join(variant.extras)}]" if variant.extras else ""
    if not (variant.index_url or variant.find_links) or variant.pypi_default:
        # PyPI's own wheel is this CUDA build: no extra index, no local version tag.
        requirements = (
            f"{package}{extras}=={version}",
            *variant.cuda_packages,
            *(f"{n}=={v}" for n, v in sorted(companions.items())),
        )
        return FrameworkInstall(requirements, None, None, None)
    local = variant.local_version or ""
    requirements = (
        f"{package}{extras}=={version}{local}",
        # torchaudio before 2.0 has no local version tag on PyTorch's index.
        *(f"{n}=={v}{local if _has_local_build(n, v) else ''}" for n, v in sorted(companions.items())),
    )
    tag = local.lstrip("+") or f"cu{cuda.replace('.', '')}"
    return FrameworkInstall(requirements, variant.index_url, variant.find_links, tag)


def _has_local_build(name: str, version: str) -> bool:
    return not (name == "torchaudio" and version_key(version) < (2,))


def _resolve_ref(cells: Sequence[Cell], framework: str, ref: CellRef) -> list[Cell]:
    return [
        cell
        for cell in cells
        if cell.framework == framework
        and cell.cuda == ref.cuda
        and cell.python == ref.python
        and cell.flavor == ref.flavor
        and _version_matches(cell.framework_version, ref.version)
    ]


def _version_matches(full: str, wanted: str) -> bool:
    return version_key(full)[: len(version_key(wanted))] == version_key(wanted)


def _newest(cells: Sequence[Cell]) -> list[Cell]:
    if not cells:
        return []
    top = max(version_key(cell.framework_version) for cell in cells)
    return [cell for cell in cells if version_key(cell.framework_version) == top]


def _with_aliases(matrix: Matrix, cells: list[Cell]) -> list[Cell]:
    problems: list[Problem] = []
    aliases: dict[int, list[str]] = {}
    for framework, image in matrix.images.items():
        refs: list[tuple[str, str, CellRef]] = [("default", matrix.release, image.default)]
        refs += [(f"aliases[{i}]", alias.tag, alias) for i, alias in enumerate(image.aliases)]
        for where, tag, ref in refs:
            found = _newest(_resolve_ref(cells, framework, ref))
            if not found:
                problems.append(
                    Problem(
                        f"{MATRIX_FILE}: images.{framework}.{where}",
                        f"names no valid cell (cuda {ref.cuda}, version {ref.version}, python {ref.python}, "
                        f"flavor {ref.flavor}); see `invoke matrix --explain`",
                    )
                )
                continue
            aliases.setdefault(id(found[0]), []).append(tag)
    result = [dataclasses.replace(cell, aliases=tuple(aliases.get(id(cell), ()))) for cell in cells]
    seen: dict[str, str] = {}
    for cell in result:
        for image_ref in cell.refs:
            if image_ref in seen:
                problems.append(
                    Problem(
                        f"{MATRIX_FILE}: images",
                        f"tag {image_ref} is given to two cells: {seen[image_ref]} and {cell.slug}",
                    )
                )
            seen[image_ref] = cell.slug
    if problems:
        raise InputError(problems)
    return result


@dataclass(frozen=True)
class Selection:
    """What the user asked for on the command line; None means "not given"."""

    cuda: str | None = None
    framework: str | None = None
    version: str | None = None
    python: str | None = None
    flavor: str | None = None


def select(matrix: Matrix, expansion: Expansion, want: Selection, *, defaults: bool = True) -> list[Cell]:
    """The cells matching the flags, or InputError naming the bad flag and what is allowed.

    A partial version picks the newest matching patch release. With `defaults`, a missing --python or
    --flavor picks the image default's value where the selection has it, else the newest Python.
    """
    _check_flags(matrix, want)
    cells = [c for c in expansion.cells if _matches(c, want)]
    if want.version is not None:
        cells = [c for c in cells if version_key(c.framework_version) == _newest_version(cells, c.framework)]
    if defaults:
        cells = _apply_defaults(matrix, cells, want)
    if not cells:
        raise InputError([_impossible(matrix, expansion, want)])
    return cells


def _newest_version(cells: Sequence[Cell], framework: str) -> tuple[int, ...]:
    return max(version_key(c.framework_version) for c in cells if c.framework == framework)


def _matches(cell: Cell, want: Selection) -> bool:
    return (
        (want.cuda is None or cell.cuda == want.cuda)
        and (want.framework is None or cell.framework == want.framework)
        and (want.version is None or _version_matches(cell.framework_version, want.version))
        and (want.python is None or cell.python == want.python)
        and (want.flavor is None or cell.flavor == want.flavor)
    )


def _apply_defaults(matrix: Matrix, cells: list[Cell], want: Selection) -> list[Cell]:
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.framework, cell.framework_version, cell.cuda), []).append(cell)
    chosen: list[Cell] = []
    for (framework, _, _), group in groups.items():
        default = matrix.images[framework].default
        if want.flavor is None:
            flavors = {c.flavor for c in group}
            flavor = default.flavor if default.flavor in flavors else sorted(flavors)[0]
            group = [c for c in group if c.flavor == flavor]
        if want.python is None:
            pythons = {c.python for c in group}
            python = default.python if default.python in pythons else max(pythons, key=version_key)
            group = [c for c in group if c.python == python]
        chosen += group
    order = {id(c): i for i, c in enumerate(cells)}
    return sorted(chosen, key=lambda c: order[id(c)])


def _check_flags(matrix: Matrix, want: Selection) -> None:
    problems: list[Problem] = []
    if want.cuda is not None and want.cuda not in matrix.axes.cuda:
        problems.append(Problem("--cuda", f"unknown CUDA version {want.cuda!r}", allowed_list(matrix.axes.cuda)))
    if want.python is not None and want.python not in matrix.axes.python:
        problems.append(
            Problem("--python", f"unknown Python version {want.python!r}", allowed_list(matrix.axes.python))
        )
    if want.flavor is not None and want.flavor not in matrix.axes.flavor:
        problems.append(Problem("--flavor", f"unknown flavor {want.flavor!r}", allowed_list(matrix.axes.flavor)))
    if want.version is not None:
        frameworks = [want.framework] if want.framework else list(matrix.frameworks)
        known = [v for fw in frameworks for v in matrix.frameworks[fw].releases]
        flag = f"--{FRAMEWORK_FLAGS[want.framework]}" if want.framework else "--version"
        if not _is_version(want.version):
            problems.append(Problem(flag, f"{want.version!r} is not a version", f"e.g. {known[-1]}"))
        elif not any(_version_matches(v, want.version) for v in known):
            problems.append(Problem(flag, f"no release matches {want.version!r}", allowed_list(known)))
    if problems:
        raise InputError(problems)


def _is_version(text: str) -> bool:
    return all(part.isdigit() for part in text.split("."))


def _impossible(matrix: Matrix, expansion: Expansion, want: Selection) -> Problem:
    """Explain why nothing matched, and offer the nearest valid cells."""
    reasons: list[str] = []
    for ex in expansion.excluded:
        c = ex.candidate
        if (
            (want.cuda is None or c.cuda == want.cuda)
            and (want.framework is None or c.framework == want.framework)
            and (want.version is None or _version_matches(c.version, want.version))
            and (want.python is None or c.python == want.python)
            and (want.flavor is None or c.flavor == want.flavor)
        ):
            # Without --cuda, "not published for CUDA X" says nothing: other CUDA versions were tried too.
            reasons += [str(r) for r in ex.reasons if want.cuda is not None or r.rule != "cuda-build"]
    unique = list(dict.fromkeys(reasons))
    preferred = {fw: image.default.python for fw, image in matrix.images.items()}
    nearest = nearest_cells(expansion.cells, want, preferred)
    message = "no valid cell matches this selection"
    if unique:
        message += ": " + "; ".join(unique[:4])
    if nearest:
        message += ". Nearest valid: " + "; ".join(_flags_for(c) for c in nearest)
    return Problem(_flags_text(want), message)


def nearest_cells(
    cells: Sequence[Cell], want: Selection, preferred_python: dict[str, str] | None = None, limit: int = 3
) -> list[Cell]:
    """Valid cells differing from the request in the fewest given flags, then by version distance,
    then preferring the image's default Python."""
    preferred = preferred_python or {}

    def distance(cell: Cell) -> tuple[int, float, bool]:
        misses = sum(
            1
            for given, actual in (
                (want.cuda, cell.cuda),
                (want.python, cell.python),
                (want.flavor, cell.flavor),
            )
            if given is not None and given != actual
        )
        if want.framework is not None and cell.framework != want.framework:
            misses += 10
        version_gap = 0.0
        if want.version is not None:
            misses += 0 if _version_matches(cell.framework_version, want.version) else 1
            a, b = version_key(cell.framework_version), version_key(want.version)
            version_gap = abs((a[0] * 100 + (a[1] if len(a) > 1 else 0)) - (b[0] * 100 + (b[1] if len(b) > 1 else 0)))
        return misses, version_gap, cell.python != preferred.get(cell.framework)

    ranked = sorted(cells, key=distance)
    seen: set[str] = set()
    result: list[Cell] = []
    for cell in ranked:
        key = f"{cell.framework}{cell.framework_version}{cell.cuda}"
        if key not in seen:
            seen.add(key)
            result.append(cell)
        if len(result) == limit:
            break
    return result


def _flags_for(cell: Cell) -> str:
    return (
        f"--cuda {cell.cuda} --{FRAMEWORK_FLAGS[cell.framework]} {cell.framework_version} "
        f"--python {cell.python} --flavor {cell.flavor}"
    )


def _flags_text(want: Selection) -> str:
    parts = []
    if want.cuda:
        parts.append(f"--cuda {want.cuda}")
    if want.version:
        parts.append(f"--{FRAMEWORK_FLAGS[want.framework]} {want.version}" if want.framework else want.version)
    elif want.framework:
        parts.append(f"--{FRAMEWORK_FLAGS[want.framework]}")
    if want.python:
        parts.append(f"--python {want.python}")
    if want.flavor:
        parts.append(f"--flavor {want.flavor}")
    return " ".join(parts) or "(no flags)"
