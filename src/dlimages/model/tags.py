"""Tag rules: how a cell's axes become its slug, immutable tag and image references, which cell each moving tag
(the release tag, matrix.yaml's aliases) points at, that no reference names two cells, and under which names CI
publishes a build (release tags from the default branch only).

Each rule is a small typed function of plain values, so that `Cell` (in cells.py) can use them for its own
properties and the expansion can check them, with imports running one way.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.model.compat import Candidate
from dlimages.model.sections import CellRef
from dlimages.model.spec import MATRIX_FILE, Matrix, version_key
from dlimages.payload.dl_stack import FRAMEWORKS

ORIGIN_HELP = {  # `invoke push`'s flags for Origin.from_flags
    "git_ref": "for CI, with --default-branch and --commit: the git ref built (e.g. refs/heads/main); only the "
    "default branch publishes release tags, any other ref each cell's immutable tag with the commit appended",
    "default_branch": "for CI: the repository's default branch, e.g. main (with --git-ref)",
    "commit": "for CI: the commit built, its full SHA (with --git-ref)",
}


def slug(point: Candidate) -> str:
    """Every axis in one path- and tag-safe word, e.g. cuda11.8-torch2.1.2-py3.10-runtime."""
    return f"cuda{point.cuda}-{FRAMEWORKS[point.framework].flag}{point.version}-py{point.python}-{point.flavor}"


def immutable_tag(release: str, point: Candidate) -> str:
    """The tag that names one cell of one release and never moves, e.g. v1.0-cuda11.8-torch2.1.2-py3.10-runtime."""
    return f"{release}-{slug(point)}"


def image_refs(image: str, tags: Iterable[str]) -> tuple[str, ...]:
    """Each tag as a full reference, e.g. lab/pytorch-universal-dev:v1.0."""
    return tuple(f"{image}:{tag}" for tag in tags)


@dataclass(frozen=True)
class Origin:
    """What CI built: the git ref (e.g. refs/heads/main), the repository's default branch and the commit."""

    git_ref: str
    default_branch: str
    commit: str

    @classmethod
    def from_flags(cls, git_ref: str | None, default_branch: str | None, commit: str | None) -> Origin | None:
        """None when no flag is given (a person pushing what they built); InputError naming each flag that is
        missing or malformed when some are."""
        given = {
            "--git-ref": (git_ref, _GIT_REF, "refs/heads/BRANCH (or another ref), as GITHUB_REF names it"),
            "--default-branch": (default_branch, _BRANCH, "a branch name, e.g. main"),
            "--commit": (commit, _COMMIT, "the commit's full SHA: 40 (or 64) lowercase hex digits"),
        }
        if not any(value for value, _, _ in given.values()):
            return None
        problems = [
            Problem(flag, f"is {value[:60]!r}" if value else "is missing (the three go together)", allowed)
            for flag, (value, form, allowed) in given.items()
            if not (value and form.fullmatch(value))
        ]
        if problems:
            raise InputError(problems)
        assert git_ref and default_branch and commit
        return cls(git_ref, default_branch, commit)

    @property
    def releases(self) -> bool:
        """Release tags (immutable and moving) are published from the default branch only: a branch that is not
        merged must never own a tag the default branch will want."""
        return self.git_ref == f"refs/heads/{self.default_branch}"


_GIT_REF = re.compile(r"refs/[A-Za-z0-9._/-]{1,200}")
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
COMMIT_DIGITS = 12


def commit_ref(ref: str, commit: str) -> str:
    """The name a build from another branch is published under: the ref with the commit appended to its tag,
    e.g. lab/x:v1.0-cuda11.8-torch2.1.2-py3.10-runtime-1a2b3c4d5e6f."""
    return f"{ref}-{commit[:COMMIT_DIGITS]}"


def published_refs(refs: Sequence[str], moving: Collection[str], origin: Origin | None) -> Mapping[str, str]:
    """Each local ref to publish and the name it is published under: every ref as itself by hand or from the
    default branch; from any other ref the immutable ones only (not in `moving`), each as `commit_ref`."""
    if origin is None or origin.releases:
        return {ref: ref for ref in refs}
    return {ref: commit_ref(ref, origin.commit) for ref in refs if ref not in moving}


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
                        f"flavor {ref.flavor}); see `{usage.MATRIX_EXPLAIN}`",
                    )
                )
                continue
            # max() keeps the first of equals: the first newest cell in the expansion's order.
            found[max(named, key=lambda i: version_key(points[i].version))].append(tag)
    return [tuple(tags) for tags in found], problems


class Tagged(Protocol):
    """What the duplicate check and the name check read of a cell."""

    @property
    def slug(self) -> str: ...

    @property
    def immutable_tag(self) -> str: ...

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


CELL_LABEL, VERSION_LABEL = "io.dlimages.cell", "org.opencontainers.image.version"
REVISION_LABEL = "org.opencontainers.image.revision"


def name_problems(asked: str, labels: Mapping[str, str], cells: Iterable[Tagged]) -> list[str]:
    """Why the image under `asked` (REPOSITORY:TAG, its registry already dropped; a registry's own path prefix is
    allowed, as a mirror adds one) is not what that name stands for: its labels (cell, version) must be those of
    the cell matrix.yaml gives the tag (an immutable tag, the release tag or an alias: a moving tag is checked
    against the cell it points to); a tag matrix.yaml does not give must be the image's own version, or that
    version with the commit appended (a branch build, `commit_ref`). Empty when the name holds; a digest without a
    tag names nothing more than its content."""
    asked = asked.split("@", 1)[0]
    tag = asked.rsplit(":", 1)[1] if ":" in asked.rsplit("/", 1)[-1] else None
    if tag is None:
        return []
    cell, version = labels.get(CELL_LABEL, ""), labels.get(VERSION_LABEL, "")
    meant = [c for c in cells if any(asked == ref or asked.endswith(f"/{ref}") for ref in c.refs)]
    if meant:
        want = meant[0]
        if (cell, version) == (want.slug, want.immutable_tag):
            return []
        return [
            f"{asked} names the cell {want.slug} ({want.immutable_tag}), but the image is "
            f"{cell or 'no cell'} ({version or 'no version label'}): another image under this name"
        ]
    branch_build = f"{version}-{labels.get(REVISION_LABEL, '')[:COMMIT_DIGITS]}"
    if version and cell and version.endswith(cell) and tag in (version, branch_build):
        return []
    return [f"{asked}: the tag {tag} names no cell of {MATRIX_FILE}, nor the image's version ({version or 'none'})"]
