"""What the advice reads and says: the build that failed (`Attempt`), what matrix.yaml offers it (`Remedies`), and
the `Diagnosis`, with the kinds of failure it tells apart."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

Kind = Literal[
    "engine",  # no Docker engine (or no docker CLI) to build with
    "disk",  # no space left
    "base",  # the base image cannot be pulled
    "hash",  # a downloaded file differs from the one the lock records
    "lock",  # the lock misses a package or a hash
    "pip-check",  # everything installed, but `pip check` found requirements the installed set does not meet
    "pytorch-index",  # PyTorch's wheel index (or its find-links page, or a mirror of them) is not reachable
    "pypi",  # PyPI or the pip index that replaces it is not reachable (or not trusted)
    "apt",  # the apt mirror is not reachable
    "pin",  # the index is reachable but has no such version
    "tls",  # a certificate is not trusted, outside pip
    "apt-package",  # the apt mirror is reachable but has no such package
    "unknown",
]


@dataclass(frozen=True)
class Remedies:
    """What matrix.yaml offers a failed build: the mirror profiles by what they mirror, and the valid cells (one on
    the offline base needs no registry, one on PyPI's wheels no PyTorch index)."""

    base_mirrors: tuple[tuple[str, str, str], ...] = ()  # (profile, registry prefix, its limits) per `bases`
    pypi: tuple[str, ...] = ()  # profiles with a PyPI mirror
    apt: tuple[str, ...] = ()  # profiles with an apt mirror
    pytorch_wheels: tuple[str, ...] = ()  # profiles that mirror PyTorch's CUDA wheels
    bases_only: tuple[str, ...] = ()  # profiles that change the bases and nothing else
    cells: tuple[Cell, ...] = ()

    @classmethod
    def from_matrix(cls, matrix: Matrix, cells: Iterable[Cell]) -> Remedies:
        profiles = list(matrix.mirrors.items())
        return cls(
            base_mirrors=tuple((n, p.bases.registry, p.bases.limits) for n, p in profiles if p.bases is not None),
            pypi=tuple(n for n, p in profiles if p.pypi),
            apt=tuple(n for n, p in profiles if p.apt is not None),
            pytorch_wheels=tuple(n for n, p in profiles if p.pytorch_wheels),
            bases_only=tuple(n for n, p in profiles if p.bases and not (p.apt or p.pypi or p.pytorch_wheels)),
            cells=tuple(cells),
        )


@dataclass(frozen=True)
class Attempt:
    """The build the output came from, as far as the advice cares (builder.attempt_of reads it off a BuildPlan)."""

    cell: Cell | None = None
    profile: str = "none"
    base_image: str | None = None  # BASE_IMAGE as passed: the cell's base, or its name in a registry mirror
    pip_index: str | None = None
    torch_index: str | None = None
    torch_find_links: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    kind: Kind
    summary: str  # one short line, for a table cell: "PyPI unreachable (127.0.0.1:9)"
    advice: str  # what failed, from where, and the ways out; several lines, bullets indented by two
    host: str | None = None  # the host that failed, as the error names it
    image: str | None = None  # the base image that could not be pulled
    evidence: str | None = None  # the line of output that shows it, shortened
