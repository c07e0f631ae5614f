"""Tag rules: how a cell's axes become its slug, immutable tag and image references, which cell each moving tag
(the release tag, matrix.yaml's aliases) points at, and that no reference names two cells.

Each rule is a small typed function of plain values, so that `Cell` (in cells.py) can use them for its own
properties and the expansion can check them, with imports running one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from dlimages.compat import Candidate
from dlimages.errors import Problem
from dlimages.payload.dl_stack import FRAMEWORKS
from dlimages.spec import MATRIX_FILE, CellRef, Matrix, version_key


def slug(point: Candidate) -> str:
    """Every axis in one path- and tag-safe word, e.g. cuda11.8-torch2.1.2-py3.10-runtime."""
    return f"cuda{point.cuda}-{FRAMEWORKS[point.framework].flag}{point.version}-py{point.python}-{point.flavor}"


def immutable_tag(release: str, point: Candidate) -> str:
    """The tag that names one cell of one release and never moves, e.g. v1.0-cuda11.8-torch2.1.2-py3.10-runtime."""
    return f"{release}-{slug(point)}"


def image_refs(image: str, tags: Iterable[str]) -> tuple[str, ...]:
    """Each tag as a full reference, e.g. lab/pytorch-universal-dev:v1.0."""
    return tuple(f"{image}:{tag}" for tag in tags)


def moving_tags(matrix: Matrix, points: Sequence[Candidate]) -> tuple[list[tuple[str, ...]], list[Problem]]:
    """The moving tags of each point, in the points' order, and a problem for each reference naming no point.

    The release tag (e.g. v1.0) goes to each image's `default` cell and each alias's tag to the cell it names;
    a partial version names the newest matching release.
    """
    found: list[list[str]] = [[] for _ in points]
    problems: list[Problem] = []
    for framework, image in matrix.images.items():
        references: list[tuple[str, str, CellRef]] = [("default", matrix.release, image.default)]
        references += [(f"aliases[{i}]", alias.tag, alias) for i, alias in enumerate(image.aliases)]
        for where, tag, ref in references:
            named = [
                i
                for i, point in enumerate(points)
                if point.matches(
                    framework=framework, version=ref.version, cuda=ref.cuda, python=ref.python, flavor=ref.flavor
                )
            ]
            if not named:
                problems.append(
                    Problem(
                        f"{MATRIX_FILE}: images.{framework}.{where}",
                        f"names no valid cell (cuda {ref.cuda}, version {ref.version}, python {ref.python}, "
                        f"flavor {ref.flavor}); see `invoke matrix --explain`",
                    )
                )
                continue
            # max() keeps the first of equals: the first newest cell in the expansion's order.
            found[max(named, key=lambda i: version_key(points[i].version))].append(tag)
    return [tuple(tags) for tags in found], problems


class Tagged(Protocol):
    """What the duplicate check reads of a cell."""

    @property
    def slug(self) -> str: ...

    @property
    def refs(self) -> tuple[str, ...]: ...


def duplicate_refs(cells: Iterable[Tagged]) -> list[Problem]:
    """A problem for each image reference given to a second cell (a moving tag may not shadow another's)."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for cell in cells:
        for ref in cell.refs:
            if ref in seen:
                problems.append(
                    Problem(f"{MATRIX_FILE}: images", f"tag {ref} is given to two cells: {seen[ref]} and {cell.slug}")
                )
            seen[ref] = cell.slug
    return problems
