"""Expand the matrix into its valid cells, every fact resolved, and the excluded combinations with their reasons.

Tags come from tags.py; choosing cells from command-line flags is selection.py's job.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dlimages.core import usage
from dlimages.core.errors import InputError
from dlimages.core.references import HUB_HOSTS, registry_of
from dlimages.model import tags as tag_rules
from dlimages.model.compat import Candidate, DriverRule, Reason, driver_rule, judge, os_for_python
from dlimages.model.requirecuda import driver_key
from dlimages.model.sections import Variant
from dlimages.model.spec import Matrix, override_applies, version_key
from dlimages.payload.dl_stack import FRAMEWORKS

# What a cell's build needs from outside (`Cell.needs`, `invoke matrix`'s needs): where its base comes from, then
# where its Python packages come from.
HUB = "hub"  # the base is pulled from Docker Hub (ubuntu, nvidia/cuda)
BASE = "base"  # the offline Debian base, made here by `invoke base` from an apt mirror: no registry
PYPI = "pypi"  # PyPI (or the index pip is given in its place): every cell's package set
INDEX_SUFFIX = "-index"  # "pytorch-index": the framework's own index or find-links page (CUDA builds PyPI lacks)


def need_words(need: str) -> str:
    """A `Cell.needs` word for people: "Docker Hub", "PyTorch's index", ..."""
    if need.endswith(INDEX_SUFFIX) and (framework := FRAMEWORKS.get(need.removesuffix(INDEX_SUFFIX))):
        return f"{framework.title}'s index"
    said = {HUB: "Docker Hub", BASE: f"the offline Debian base (`{usage.BASE}`)", PYPI: "PyPI"}
    return said.get(need, f"the registry {need}")


@dataclass(frozen=True)
class FrameworkInstall:
    """How pip gets the framework: the requirement strings and where the CUDA build comes from."""

    requirements: tuple[str, ...]
    index_url: str | None  # PyTorch's own wheel index: the framework's wheels come from it alone (pip's --index-url)
    find_links: str | None  # a find-links page holding the CUDA build (PyTorch's older releases)
    variant_tag: str | None  # e.g. cu118: names the build on PyTorch's index and on mirrors of it
    source_builds: tuple[str, ...] = ()  # requirements PyPI has only as source (matrix.yaml `source_builds`)

    @property
    def constraints(self) -> tuple[str, ...]:
        """The requirements without extras, to hold the framework fixed while other packages install."""
        return tuple(re.sub(r"\[[^]]*\]", "", requirement) for requirement in self.requirements)


@dataclass(frozen=True)
class CellCaveat:
    """A build's known failure on some nodes (matrix.yaml `caveats` of its variant), for the doctor to say."""

    text: str
    source: str
    arch: tuple[str, ...] = ()  # the GPUs it concerns; empty: any
    driver_below: str | None = None  # the drivers it concerns; None: any

    def concerns(self, driver: str | None, archs: Iterable[str | None]) -> bool:
        old = self.driver_below is None or (driver is not None and driver_key(driver) < driver_key(self.driver_below))
        return old and (not self.arch or any(arch in self.arch for arch in archs))


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
    driver: DriverRule  # which NVIDIA drivers run the image: NVIDIA_REQUIRE_CUDA, the driver labels, the doctor
    arch_sass: tuple[str, ...]
    arch_ptx: tuple[str, ...]
    install: FrameworkInstall
    packages: tuple[tuple[str, str], ...]
    bootstrap_base: bool
    aliases: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    base_end_of_life: str | None = None  # NVIDIA's page listing the base's tags as unsupported, when it does
    caveats: tuple[CellCaveat, ...] = ()

    @property
    def min_driver(self) -> str:
        """The driver CUDA's own release ships with: the image runs on any GPU with it or newer."""
        return self.driver.toolkit_driver

    @property
    def compat_driver(self) -> str:
        """The oldest driver that runs the image on any GPU brand (minor-version compatibility, for the GPUs the build
        carries machine code for); min_driver where the base's cuda-compat takes over below it."""
        return self.driver.compat_driver

    @property
    def end_of_life_note(self) -> str | None:
        """The build's warning for a base whose tags NVIDIA no longer supports; None for any other cell."""
        if self.base_end_of_life is None:
            return None
        return (
            f"{self.base_image}: NVIDIA lists this tag as unsupported (end of life; {self.base_end_of_life}); it may "
            "be deleted from the registries at any time, so pin it by digest (images/bases.lock.json) or mirror it "
            f"(`{usage.BASES_MIRROR}`) while it can still be pulled"
        )

    @property
    def needs(self) -> tuple[str, ...]:
        """Where its build takes what it starts from and installs, in that order: its base (HUB, another registry by
        its host, or BASE, made here), the framework's own index where the cell names one ("pytorch-index"), PyPI.
        A lock resolved from that index names it as well, and only then: the index is part of the lock's input
        digest, so a lock that disagrees is stale (`invoke lock --check`); an unlocked cell asks the same indexes."""
        host = registry_of(self.base_image)
        base = BASE if self.bootstrap_base else HUB if host in HUB_HOSTS else host
        own_index = self.install.index_url or self.install.find_links
        return (base, *([f"{self.framework}{INDEX_SUFFIX}"] if own_index else []), PYPI)

    @property
    def candidate(self) -> Candidate:
        """The point of the axes this cell is."""
        return Candidate(self.framework, self.framework_version, self.cuda, self.python, self.flavor)

    @property
    def slug(self) -> str:
        """Every axis in one path- and tag-safe word, e.g. cuda11.8-torch2.1.2-py3.10-runtime."""
        return tag_rules.slug(self.candidate)

    @property
    def immutable_tag(self) -> str:
        return tag_rules.immutable_tag(self.release, self.candidate)

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.immutable_tag, *self.aliases)

    @property
    def refs(self) -> tuple[str, ...]:
        return tag_rules.image_refs(self.image, self.tags)

    @property
    def dockerfile(self) -> str:
        return f"images/{self.framework}/{self.slug}/Dockerfile"

    @property
    def title(self) -> str:
        return self.candidate.title

    @property
    def arch_list(self) -> list[str]:
        """The build's arch list as the framework reports it: the matrix's PTX targets sm_XY become compute_XY."""
        return [*self.arch_sass, *(f"compute_{arch.removeprefix('sm_')}" for arch in self.arch_ptx)]

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
            "forward_compat_branches": list(self.driver.forward_compat_branches),
            "nvidia_require_cuda": self.driver.require_cuda,
            "base_end_of_life": self.base_end_of_life,
            "cuda_arch_list": self.arch_list,
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
    aliases, problems = tag_rules.moving_tags(matrix, [cell.candidate for cell in cells])
    cells = [dataclasses.replace(cell, aliases=tags) for cell, tags in zip(cells, aliases, strict=True)]
    problems += tag_rules.duplicate_refs(cells)
    if problems:
        raise InputError(problems)
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
    end_of_life: str | None = None
    if variant.cuda_libs == "wheel":
        base_image, cuda_source, cudnn = os_spec.image, "wheel", variant.cudnn
    else:
        images = matrix.nvidia_cuda.toolkits[c.cuda]
        base_image = f"{matrix.nvidia_cuda.repository}:{toolkit.toolkit}-cudnn8-{c.flavor}-{os_name}"
        cuda_source, cudnn, end_of_life = "base", images.cudnn, images.end_of_life
        if version_key(images.cudnn)[:2] != version_key(variant.cudnn)[:2]:
            notes.append(
                f"upstream tested cuDNN {variant.cudnn}; the base image carries cuDNN {images.cudnn}, "
                "compatible by cuDNN's same-major, newer-minor rule"
            )
    pins = dict(matrix.packages.default)
    for key, override in matrix.packages.overrides.items():
        if override_applies(key, framework.package, c.version) or override_applies(key, "python", c.python):
            pins.update(override)
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
        driver=driver_rule(matrix, c.cuda, variant),
        arch_sass=tuple(variant.arch.sass),
        arch_ptx=tuple(variant.arch.ptx),
        install=_pinned(
            _install(framework.package, c.version, c.cuda, release.companions, variant),
            release.pins,
            tuple(sorted(release.source_builds)),
        ),
        packages=tuple(sorted(pins.items())),
        bootstrap_base=os_spec.bootstrap and cuda_source == "wheel",
        caveats=tuple(CellCaveat(c.text, c.source, tuple(c.arch), c.driver_below) for c in variant.caveats),
        notes=tuple(notes),
        base_end_of_life=end_of_life,
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


def _pinned(install: FrameworkInstall, pins: dict[str, str], source_builds: tuple[str, ...]) -> FrameworkInstall:
    """The release's own pins (matrix.yaml `pins`) installed and locked with the framework."""
    extra = tuple(f"{name}=={version}" for name, version in sorted(pins.items()))
    return dataclasses.replace(install, requirements=install.requirements + extra, source_builds=source_builds)


def _has_local_build(name: str, version: str) -> bool:
    return not (name == "torchaudio" and version_key(version) < (2,))
